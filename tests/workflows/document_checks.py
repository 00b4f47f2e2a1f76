"""A workflow that only validates extracted fields, so the tests run the document pipeline's
validation where the real workflow will: in the SDK's full sandbox, which re-imports
``workflows.documents`` for every run and enforces every restriction."""

from __future__ import annotations

from typing import Any

from temporalio import workflow

from workflows.documents import ValidationReport, schema_named


@workflow.defn(name="DocumentChecks")
class DocumentChecks:
    @workflow.run
    async def run(self, schema: str, value: Any) -> ValidationReport:
        return schema_named(schema).check(value)
