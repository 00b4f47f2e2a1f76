"""Steps any pipeline uses, Python or file: the model call (``llm_call``) and its sub-graph
(``model_call_states``, ``model_call_edges``), document extraction and the store
(``documents``), embeddings (``vectors``). Their payloads are ``document_payloads`` and their
names ``contract``; workflow code, passed through the sandbox."""

from workflows.steps import documents, llm_call, vectors
from workflows.steps.model_call import CallStates, model_call_edges, model_call_states

# A tuple: workflow modules hold no mutable module state.
__all__ = (
    "CallStates",
    "documents",
    "llm_call",
    "model_call_edges",
    "model_call_states",
    "vectors",
)
