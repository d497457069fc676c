from graph.core import Graph
from graph.search import shortest_path


def make_graph(edges):
    graph = Graph()
    for a, b in edges:
        graph.add_edge(a, b)
    return graph


def test_edges_are_undirected():
    graph = make_graph([("a", "b")])
    assert graph.neighbours("b") == ["a"]


def test_direct_path_in_order():
    graph = make_graph([("a", "b"), ("b", "c"), ("c", "d")])
    assert shortest_path(graph, "a", "d") == ["a", "b", "c", "d"]


def test_path_against_edge_direction():
    graph = make_graph([("a", "b"), ("b", "c")])
    assert shortest_path(graph, "c", "a") == ["c", "b", "a"]


def test_shortest_of_several():
    graph = make_graph([("s", "x"), ("x", "y"), ("y", "t"), ("s", "z"), ("z", "t")])
    assert shortest_path(graph, "s", "t") == ["s", "z", "t"]


def test_ties_follow_edge_order():
    graph = make_graph([("s", "a"), ("s", "b"), ("a", "t"), ("b", "t")])
    assert shortest_path(graph, "s", "t") == ["s", "a", "t"]


def test_same_node():
    graph = make_graph([("a", "b")])
    assert shortest_path(graph, "a", "a") == ["a"]


def test_unreachable_and_unknown():
    graph = make_graph([("a", "b"), ("c", "d")])
    assert shortest_path(graph, "a", "d") is None
    assert shortest_path(graph, "a", "zzz") is None


def test_self_loop_is_listed_once():
    graph = make_graph([("a", "a"), ("a", "b")])
    assert graph.neighbours("a") == ["a", "b"]
