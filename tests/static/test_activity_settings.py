"""No activity class takes the whole ``Settings``: each takes the small frozen values it uses,
derived from the settings by the worker's wiring (``activities.wiring``)."""

from __future__ import annotations

import ast

import pytest

from tests.support import ROOT


def _is_activity(method: ast.stmt) -> bool:
    if not isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef):
        return False
    for decorator in method.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute) and target.attr == "defn":
            return True
    return False


def activity_classes() -> dict[str, ast.ClassDef]:
    """Every class under ``activities/`` with a method that is an activity, by name."""
    found = {}
    for path in sorted((ROOT / "activities").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(_is_activity(m) for m in node.body):
                found[node.name] = node
    return found


def settings_parameters(cls: ast.ClassDef) -> list[str]:
    """The parameters of ``cls``'s constructor whose annotation names ``Settings``."""
    for method in cls.body:
        if isinstance(method, ast.FunctionDef) and method.name == "__init__":
            arguments = [*method.args.args, *method.args.kwonlyargs]
            return [
                a.arg
                for a in arguments
                if a.annotation is not None
                and "Settings" in {n.id for n in ast.walk(a.annotation) if isinstance(n, ast.Name)}
            ]
    return []


CLASSES = activity_classes()


def test_the_check_finds_the_activity_classes() -> None:
    """The scan sees the project's activity classes (a scan that found none would pass)."""
    assert {
        "LlmActivities",
        "NotifyActivities",
        "PipelineActivities",
        "PlanActivities",
        "PromptActivities",
    } <= set(CLASSES)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_no_activity_class_takes_the_whole_settings(name: str) -> None:
    """The activity class's constructor takes no parameter annotated ``Settings``."""
    assert settings_parameters(CLASSES[name]) == []


def test_the_check_catches_a_settings_parameter() -> None:
    """A constructor with a ``Settings`` parameter is caught."""
    source = (
        "class X:\n"
        "    def __init__(self, settings: Settings) -> None: ...\n"
        "    @activity.defn(name='x')\n"
        "    async def x(self) -> None: ...\n"
    )
    [cls] = [n for n in ast.parse(source).body if isinstance(n, ast.ClassDef)]
    assert settings_parameters(cls) == ["settings"]
