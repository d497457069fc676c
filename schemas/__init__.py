"""Avro schemas, the registry-free codec and the event model of trialog.

Every fact of a run is an Avro record encoded with single-object encoding (`codec`); every piece of
episode state is a fold of episode events (`fold`). Kafka and Faust adapters live in `kafka_serde` and
`faust_codec`. Callers import the module that defines a name (`from schemas.codec import Codec`): the
package re-exports nothing, so importing one module does not load them all.
"""
