"""A store on a Redis Cluster: three local masters, the broker on a plain Redis beside it.

``ANTWORT_REDIS_URL=redis+cluster://…`` (``tests.support.cluster``: ``redis-server
--cluster-enabled yes`` three times, joined with ``redis-cli --cluster create``) holds the
records, events and results; ``ANTWORT_BROKER_URL`` (the tests' Redis) the queues. A gateway,
an inference worker and a tool worker serve streamed, tool-using, multi-turn responses, a chain
by ``previous_response_id`` and a conversation through the official SDK, with fair share and
the in-flight limit on, and the jobs a request waits for (a count, a compaction).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import redis

from app.keys import CLUSTER_SHARDS, Keys
from tests.conftest import delete_prefix
from tests.e2e.conftest import Fleet
from tests.e2e.helpers import internal
from tests.e2e.own_fleet import small_fleet
from tests.support.cluster import LocalCluster


@pytest.fixture
def cluster_fleet(
    redis_cluster: LocalCluster,
    redis_url: str,
    sim_url: str,
    tmp_path: Path,
    process_environ: dict[str, str],
) -> Iterator[Fleet]:
    prefix = f"antwort-e2e-{uuid.uuid4().hex[:8]}:"
    try:
        with small_fleet(
            process_environ,
            tmp_path,
            sim_url,
            ANTWORT_REDIS_URL=redis_cluster.url,
            ANTWORT_BROKER_URL=redis_url,
            ANTWORT_KEY_PREFIX=prefix,
            # a tenant's keys in one slot, its responses in many
            ANTWORT_TENANT_MAX_RUNNING="2",
            ANTWORT_RATE_LIMIT_MAX_IN_FLIGHT="4",
            ANTWORT_COMPACTION_KEY="cluster-e2e-key",  # compaction items are sealed with it
        ) as fleet:
            yield fleet
    finally:
        with redis_cluster.client() as store:
            delete_prefix(store, prefix)  # type: ignore[arg-type]
        with redis.Redis.from_url(redis_url) as queues:
            delete_prefix(queues, prefix)


@pytest.mark.e2e
def test_a_fleet_on_a_cluster_streams_tool_using_chains_and_conversations(
    cluster_fleet: Fleet, redis_cluster: LocalCluster, redis_url: str
) -> None:
    fleet = cluster_fleet
    with openai.OpenAI(base_url=f"{fleet.base_url}/v1", api_key="k", max_retries=0) as client:
        with client.responses.create(
            model="antwort-sim",
            input="use calculator expression=6*7 and unit_convert",
            tools=internal("calculator", "unit_convert"),  # type: ignore[arg-type]
            stream=True,
        ) as stream:
            events = list(stream)
        first = events[-1].response  # type: ignore[union-attr]
        assert events[-1].type == "response.completed"
        assert [event.sequence_number for event in events] == list(range(len(events)))
        outputs = [item for item in first.output if item.type == "function_call_output"]
        assert len(outputs) == 2  # two calls at once: a chord, through the broker's Redis

        replayed = list(client.responses.retrieve(first.id, stream=True, starting_after=2))
        assert [event.sequence_number for event in replayed] == list(range(3, len(events)))

        second = client.responses.create(
            model="antwort-sim",
            input="calculator expression=3*3",
            tools=internal("calculator"),  # type: ignore[arg-type]
            previous_response_id=first.id,
        )
        assert second.status == "completed" and second.output_text == "Tool results: 9"

        conversation = client.conversations.create()
        for text in ("calculator expression=2*5", "Say hello"):
            with client.responses.create(
                model="antwort-sim",
                input=text,
                tools=internal("calculator"),  # type: ignore[arg-type]
                conversation=conversation.id,
                stream=True,
            ) as stream:
                assert list(stream)[-1].type == "response.completed"
        items = list(client.conversations.items.list(conversation.id, order="asc"))
        assert [item.type for item in items][:3] == [
            "message",
            "function_call",
            "function_call_output",
        ]
        assert items[-1].type == "message" and items[-1].role == "assistant"  # type: ignore[union-attr]

        # the jobs a request waits for (their job, lease and result keys share a slot), and a
        # compaction before a turn
        counted = client.responses.input_tokens.count(
            model="antwort-sim", input="How long?", previous_response_id=second.id
        )
        assert counted.input_tokens > 0
        compacted = client.responses.compact(model="antwort-sim", previous_response_id=second.id)
        assert compacted.output[-1].type == "compaction"
        third = client.responses.create(
            model="antwort-sim",
            input="And now?",
            previous_response_id=second.id,
            context_management=[{"type": "compaction", "compact_threshold": 5}],
        )
        assert [item.type for item in third.output] == ["compaction", "message"]

    # every event came live over sharded pub/sub: the hub never lost its subscriptions
    assert "event hub" not in (fleet.log_dir / "gateway.log").read_text()
    prefix = fleet.env["ANTWORT_KEY_PREFIX"]
    keys = Keys(prefix, CLUSTER_SHARDS)
    with redis_cluster.client() as store, redis.Redis.from_url(redis_url) as queues:
        assert store.exists(keys.record(first.id), keys.events(first.id)) == 2
        assert queues.keys(f"{prefix}celery*") and not queues.keys(f"{prefix}*r:*")
    assert keys.shard_of(second.id) == keys.shard_of(first.id)  # a chain keeps to one slot
