"""The optional peer: the same steps as a LangGraph graph with its SQLite checkpointer.

``python -m bench.peer_langgraph --n 1000 --db PATH`` prints one JSON line: runs per second and
latency, or ``{"skipped": reason}`` when ``langgraph`` is not installed (``pip install -e
'.[bench]'``). The graph has as many trivial nodes as our pipeline's happy path has activities;
the checkpointer writes after every step, like Temporal's history, but one process owns the
file and nothing survives that process's machine: no retries, timers, signals or workers.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import time
from typing import Any, TypedDict


class PipelineState(TypedDict):
    """The graph's state: the request and what each step adds."""

    request_id: str
    prompt: str
    content: str
    embedding_id: str


def _fetch_prompt(state: PipelineState) -> dict[str, str]:
    return {"prompt": state["request_id"]}


def _invoke_llm(state: PipelineState) -> dict[str, str]:
    return {"content": state["prompt"]}


def _generate_embedding(state: PipelineState) -> dict[str, str]:
    return {"embedding_id": state["content"]}


def run(n: int, db: str) -> dict[str, Any]:
    """``n`` runs one after another, each its own thread, checkpointed to ``db``."""
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, StateGraph
    except ImportError as err:
        return {"skipped": f"langgraph not installed ({err.name}); pip install -e '.[bench]'"}
    from importlib.metadata import version

    graph = StateGraph(PipelineState)
    graph.add_node("fetch_prompt", _fetch_prompt)
    graph.add_node("invoke_llm", _invoke_llm)
    graph.add_node("generate_embedding", _generate_embedding)
    graph.add_edge(START, "fetch_prompt")
    graph.add_edge("fetch_prompt", "invoke_llm")
    graph.add_edge("invoke_llm", "generate_embedding")
    graph.add_edge("generate_embedding", END)
    connection = sqlite3.connect(db, check_same_thread=False)
    try:
        # Any: the langgraph types are only there when the optional extra is installed.
        app: Any = graph.compile(checkpointer=SqliteSaver(connection))
        latencies = []
        began = time.perf_counter()
        for i in range(n):
            start = time.perf_counter()
            request_id = f"{i:024x}"
            config = {"configurable": {"thread_id": request_id}}
            state: PipelineState = {
                "request_id": request_id,
                "prompt": "",
                "content": "",
                "embedding_id": "",
            }
            out = app.invoke(state, config)
            if out["embedding_id"] != request_id:
                raise RuntimeError(f"run {request_id} did not finish")
            latencies.append(time.perf_counter() - start)
        elapsed = time.perf_counter() - began
    finally:
        connection.close()
    return {
        "n": n,
        "runs_per_s": n / elapsed,
        "p50_s": statistics.median(latencies),
        "langgraph": version("langgraph"),
        "langgraph_checkpoint_sqlite": version("langgraph-checkpoint-sqlite"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.peer_langgraph")
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--db", required=True)
    args = parser.parse_args()
    print(json.dumps(run(args.n, args.db)))


if __name__ == "__main__":
    main()
