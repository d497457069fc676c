"""Breadth-first search."""

from collections import deque


def shortest_path(graph, start, goal):
    if start not in graph or goal not in graph or start == goal:
        return None
    parents = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            break
        for neighbour in graph.neighbours(node):
            if neighbour not in parents:
                parents[neighbour] = node
                queue.append(neighbour)
    if goal not in parents:
        return None
    path = []
    node = goal
    while node is not None:
        path.append(node)
        node = parents[node]
    return path
