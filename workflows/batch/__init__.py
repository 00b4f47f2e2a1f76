"""The batch lane's own workflow, ``LlmBatch`` (``workflows.batch.workflow``): one run per group
of batched model calls."""
