"""Adjacency lists."""


class Graph:
    def __init__(self):
        self._adjacent = {}

    def add_node(self, node):
        self._adjacent.setdefault(node, [])

    def add_edge(self, a, b):
        self.add_node(a)
        self.add_node(b)
        self._adjacent[a].append(b)

    def neighbours(self, node):
        return list(self._adjacent.get(node, []))

    def __contains__(self, node):
        return node in self._adjacent
