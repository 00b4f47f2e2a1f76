"""Progress for a pipeline file's states where the file gives none: states on one loop (a
strongly connected component) share one figure, and each later stage has a higher one, so
progress never goes down along an edge; a figure the file gives that would make it go down is
reported at the step that gives it.

Deterministic: workflow code compiles a run's recorded spec with it.
"""

from __future__ import annotations

from collections.abc import Mapping

from workflows.data.catalog import CompiledStep
from workflows.data.json_schemas import Loc
from workflows.engine.graph import IDLE, StateInfo, Transition


def set_progress(
    steps: Mapping[str, CompiledStep],
    states: dict[str, StateInfo],
    transitions: list[Transition],
) -> list[tuple[Loc, str]]:
    """Set each state's progress in ``states``: the file's, else by stage (see the module
    docstring); where progress would go down, the path to blame and a sentence."""
    owner = {
        state: step
        for step in steps.values()
        for state in (step.spec.id, *step.sub_states.values())
    }
    explicit = {
        state: step.spec.progress for state, step in owner.items() if step.spec.progress is not None
    }
    working = [state for state in states]
    levels = _stage_levels(working, [t for t in transitions if t.source != IDLE])
    groups: dict[int, list[str]] = {}
    for state, (group, _) in levels.items():
        groups.setdefault(group, []).append(state)
    top = max((level for _, level in levels.values()), default=1)
    progress: dict[str, int] = {}
    for members in groups.values():
        given = [explicit[state] for state in members if state in explicit]
        level = levels[members[0]][1]
        figure = max(given) if given else max(1, min(99, round(level * 100 / (top + 1))))
        for state in members:
            progress[state] = explicit.get(state, figure)
    for state, info in list(states.items()):
        states[state] = StateInfo(
            info.status, progress[state], info.description, info.role, info.shown
        )
    found: list[tuple[Loc, str]] = []
    reported: set[Loc] = set()
    for t in transitions:
        source = progress.get(t.source, 0)
        target = progress.get(t.target, 100)
        if target >= source:
            continue
        # Blame the figure the file gives: the later step's, else the earlier one's.
        step = owner[t.target] if t.target in explicit else owner[t.source]
        path = ("steps", step.index, "progress" if step.spec.progress is not None else "id")
        if path in reported:
            continue
        reported.add(path)
        found.append(
            (
                path,
                f"progress goes down from {t.source} ({source}%) to {t.target} ({target}%): "
                "a later step needs a higher figure, and a loop one figure",
            )
        )
    return found


def _stage_levels(states: list[str], transitions: list[Transition]) -> dict[str, tuple[int, int]]:
    """Each state's loop (strongly connected component, by number) and its stage: 1 for the
    first, one more than the latest stage before it otherwise."""
    following: dict[str, list[str]] = {state: [] for state in states}
    for t in transitions:
        if t.source in following and t.target in following:
            following[t.source].append(t.target)
    component = _components(states, following)
    preceding: dict[int, set[int]] = {c: set() for c in set(component.values())}
    for source, targets in following.items():
        for target in targets:
            if component[source] != component[target]:
                preceding[component[target]].add(component[source])
    level: dict[int, int] = {}
    pending = sorted(preceding)
    while pending:
        ready = [c for c in pending if preceding[c] <= set(level)]
        for c in ready:
            level[c] = 1 + max((level[p] for p in preceding[c]), default=0)
        pending = [c for c in pending if c not in level]
        if not ready:  # cannot happen on a condensation; kept so the loop always ends
            for c in pending:
                level[c] = 1
            break
    return {state: (component[state], level[component[state]]) for state in states}


def _components(states: list[str], following: Mapping[str, list[str]]) -> dict[str, int]:
    """Strongly connected components, numbered (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    component: dict[str, int] = {}

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)

    for root in states:
        if root in index:
            continue
        visit(root)
        work = [(root, iter(following[root]))]
        while work:
            node, targets = work[-1]
            descended = False
            for target in targets:
                if target not in index:
                    visit(target)
                    work.append((target, iter(following[target])))
                    descended = True
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            if descended:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                number = len(set(component.values()))
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component[member] = number
                    if member == node:
                        break
    return component
