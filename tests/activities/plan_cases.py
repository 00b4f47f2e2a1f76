"""A table of requests and worker settings for comparing planning paths: review modes and
floors, reviewers, budgets and tenants, fallback models, lanes and the result cache, review
policies, and the document pipeline's review floor. Plain data, so the plans that planning
made before ``plan_run`` could be recorded from these same cases
(``plans_before_plan_run.json``)."""

from __future__ import annotations

from typing import Any

REQUEST_ID = "0123456789abcdef01234567"
STORE = {"capacity_store_url": "redis://127.0.0.1:1/0"}

SETTINGS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "strict": {
        "review_min": "always",
        "allowed_reviewers": "alice,bob",
        "llm_max_attempts": 4,
        "llm_fallback_model": "fallback-model",
        "llm_fallback_after": 3,
        "run_budget_usd": 0.5,
        "review_timeout_s": 600,
        "escalation_timeout_s": 300,
    },
    "lenient": {
        **STORE,
        "review_min": "never",
        "document_review_min": "never",
        "llm_fallback_model": None,
        "llm_batch": "default",
        "llm_result_cache_ttl_s": 60,
        "tenant_budgets_usd": '{"acme": 5.0}',
        "tenant_budget_default_usd": 1.0,
        "budget_policy": "fail",
        "otel_capture_content": True,
        "review_webhook_url": "https://hooks.example/review",
    },
    "policies": {
        **STORE,
        "document_review_min": "auto",
        "llm_batch": "allowed",
        "review_groups": '{"pair": ["alice", "bob"]}',
        "review_policies": (
            '{"llm@acme": {"name": "two", "stages": [{"group": "pair", "approvals": 2}]},'
            ' "documents": {"name": "docs", "stages": [{"group": "pair", "approvals": 1}]}}'
        ),
    },
}

REQUESTS: dict[str, dict[str, Any]] = {
    "plain": {},
    "never": {"review": "never"},
    "always-narrowed": {
        "review": "always",
        "options": {
            "allowed_reviewers": ["bob", "mallory"],
            "llm_max_attempts": 2,
            "review_timeout_s": 60,
            "max_cost_usd": 0.1,
        },
    },
    "tenant-batch": {
        "tenant": "acme",
        "metadata": {"team": "ops", "ticket": 7},
        "options": {"lane": "batch", "result_cache": False},
    },
    "requester": {"requested_by": "carol", "options": {"escalation_timeout_s": 30}},
    "nobody": {"options": {"allowed_reviewers": ["mallory"]}},
    "unbudgeted": {"tenant": "nobody"},
}

# Each pipeline's request content beside the cases' fields.
CONTENT: dict[str, list[dict[str, Any]]] = {
    "llm": [{"user_message": "Hi"}],
    "documents": [
        {"document": "Invoice 7\nTotal: 12.00"},
        {"document": "file:///srv/invoices/inv-0042.txt"},
    ],
}


def cases() -> list[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    """Every case: its id, the pipeline, the worker's settings and the request."""
    found = []
    for pipeline, contents in CONTENT.items():
        for index, content in enumerate(contents):
            for settings_name, settings in SETTINGS.items():
                for request_name, request in REQUESTS.items():
                    case = f"{pipeline}{index}-{settings_name}-{request_name}"
                    payload = {"request_id": REQUEST_ID, **content, **request}
                    found.append((case, pipeline, settings, payload))
    return found
