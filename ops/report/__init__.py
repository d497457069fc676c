"""`trialog report RUN --out DIR`: one self-contained HTML page about a run, from its log alone.

`data` gathers the figures (pure), `svg` draws them by hand (inline SVG, no script, no external resource),
`html` lays the page out, `links` makes the Jaeger trace links, `cli` is the command.
"""
