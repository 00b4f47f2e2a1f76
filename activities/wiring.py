"""The activities a worker registers, built from its shared clients: the engine's (every
worker's), and each pipeline's from the factory its registration names
(``Pipeline.activities``, ``module:function``).

A factory is a function of `Clients` that returns activity callables; it derives from
``Clients.settings`` the few values each activity class takes (never the whole settings).
The worker opens and closes the clients (``aiorch.worker.clients``), so a factory opens
nothing that needs closing. A platform team's pipeline package writes its own factory the same
way (docs/extending.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp
from openai import AsyncOpenAI
from qdrant_client import AsyncQdrantClient
from sqlalchemy import Engine
from temporalio.client import Client

from activities.batch import BatchActivities, BatchLane
from activities.capacity import CallGate
from activities.dead_letter import DeadLetterActivities
from activities.documents.extract import DocumentTexts, ExtractActivities
from activities.documents.plan import DocumentPlanActivities
from activities.documents.store import StoreActivities
from activities.experiments import Rollouts
from activities.input_loader import InputLoader
from activities.lineage import LineageActivities
from activities.llm import LlmActivities
from activities.notify import NotifyActivities, webhook
from activities.pipelines import PipelineActivities
from activities.planning import PlanActivities, PlanDefaults
from activities.prompt import PromptActivities
from activities.vectors import VectorActivities
from aiorch_runtime.batch_store import BatchStore
from aiorch_runtime.capacity import CapacityStore
from aiorch_runtime.codec import keyring_from_settings
from aiorch_runtime.config import Settings, lab_queue
from aiorch_runtime.experiment_halts import HaltStore
from aiorch_runtime.genai import GenAiTelemetry
from aiorch_runtime.pipeline_files import PipelineFolder
from aiorch_runtime.result_cache import ResultCache
from workflows.data import Catalog
from workflows.engine.pipeline import Pipeline

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sqs import SQSClient

Activity = Callable[..., Any]


@dataclass(frozen=True)
class Clients:
    """The worker's shared clients and what its activities are built from: its settings, the
    Temporal client, the model and vector store clients, S3 and SQS, the input loader and
    document texts, the call gate and GenAI telemetry, the capacity store with the result
    cache and batch store kept beside it (None without ``CAPACITY_STORE_URL``), the batch lane
    (None unless ``LLM_BATCH`` allows it), the webhooks' HTTP session, the document store's
    SQL engine, the pipeline folder and catalog, the pipelines written in Python, and the
    defaults every run's plan starts from."""

    settings: Settings
    temporal: Client
    openai: AsyncOpenAI
    vectors: AsyncQdrantClient
    s3: S3Client
    sqs: SQSClient
    loader: InputLoader
    texts: DocumentTexts
    gate: CallGate
    genai: GenAiTelemetry
    capacity: CapacityStore | None
    results: ResultCache | None
    batches: BatchStore | None
    lane: BatchLane | None
    webhooks: aiohttp.ClientSession
    sql: Engine
    folder: PipelineFolder | None
    catalog: Catalog
    pipelines: Sequence[Pipeline[Any, Any]]
    plans: PlanDefaults


ActivityFactory = Callable[[Clients], Sequence[Activity]]


def engine_activities(clients: Clients) -> list[Activity]:
    """What every run may call whatever its pipeline: the model call (and the batch lane's
    activities with a batch store), the plan of any pipeline's run (``plan_run``), dead
    letters, continuation checks, review notices, and the planning and notices of pipelines
    defined as data."""
    settings = clients.settings
    llm = LlmActivities(
        clients.openai,
        clients.loader,
        settings.llm_timeout_s,
        prices=settings.llm_price_table,
        gate=clients.gate,
        telemetry=clients.genai,
        budgeted_tenants=frozenset(settings.tenant_budgets_usd),
        results=clients.results,
        batch=clients.lane,
        cache_scope=settings.llm_prompt_cache_scope,
        documents=clients.texts,
    )
    batch = (
        BatchActivities(
            llm,
            clients.openai,
            clients.temporal,
            clients.batches,
            base_url=settings.openai_base_url,
            gate=clients.gate,
            telemetry=clients.genai,
            results=clients.results,
            prices=settings.llm_price_table,
        ).activities
        if clients.batches is not None
        else ()
    )
    dead_letters = DeadLetterActivities(
        clients.sqs,
        settings.dlq_queue_name,
        content_free=keyring_from_settings(settings) is not None,
    )
    lineage = LineageActivities(clients.temporal, settings.temporal_task_queue)
    notify = NotifyActivities(webhook(settings), clients.webhooks)
    data = PipelineActivities(
        clients.plans,
        clients.folder,
        clients.catalog,
        [pipeline.workflow_type for pipeline in clients.pipelines],
        notify,
        rollouts(clients),
    )
    plans = PlanActivities(
        clients.plans, {p.name: p.request for p in clients.pipelines}, rollouts(clients)
    )
    return [
        plans.plan_run,
        llm.invoke_llm,
        *batch,
        dead_letters.send_dead_letter,
        lineage.verify_continuation,
        notify.notify_reviewers,
        data.plan_pipeline,
        data.notify_pipeline,
    ]


def rollouts(clients: Clients) -> Rollouts:
    """The worker's experiments, their halts read from the capacity store (which
    ``EXPERIMENTS`` needs)."""
    settings = clients.settings
    halts = HaltStore(clients.capacity.redis) if clients.capacity is not None else None
    forks = lab_queue(settings.temporal_task_queue, settings.lab_task_queue)
    return Rollouts(settings.experiments, halts, lab_queue=forks if settings.lab_enabled else None)


def llm_activities(clients: Clients) -> list[Activity]:
    """The LLM pipeline's: its plan (``fetch_prompt``) and its reply's embedding."""
    settings = clients.settings
    prompts = PromptActivities(clients.plans, clients.loader, rollouts(clients))
    vectors = VectorActivities(
        clients.openai,
        clients.vectors,
        settings.vector_collection,
        settings.embedding_model,
        telemetry=clients.genai,
    )
    return [prompts.fetch_prompt, vectors.generate_embedding, vectors.delete_embedding]


def document_activities(clients: Clients) -> list[Activity]:
    """The document pipeline's: its plan, the text extraction and the store."""
    plans = DocumentPlanActivities(clients.plans)
    return [
        plans.plan_document,
        ExtractActivities(clients.texts).extract_text,
        StoreActivities(clients.sql).store_document,
    ]
