"""On a Redis Cluster every key one script call touches hashes to one slot."""

from __future__ import annotations

from redis.crc import key_slot

from app.keys import CLUSTER_SHARDS, Keys
from app.responses import new_response_id

SHARDED = Keys("antwort:", CLUSTER_SHARDS)


def _slots(*keys: str) -> set[int]:
    return {key_slot(key.encode()) for key in keys}


def test_every_key_of_a_response_and_its_watches_share_one_slot() -> None:
    rid = "resp_" + "ab" * 24
    shard_channel, _, published_id = SHARDED.channel(rid).partition(" ")

    assert published_id == rid
    assert len(_slots(
        SHARDED.record(rid), SHARDED.inputs(rid), SHARDED.events(rid), SHARDED.sequence(rid),
        SHARDED.turn_starts(rid, 3), SHARDED.queued_resends(rid), SHARDED.lease(rid),
        SHARDED.sweep_claim(rid), SHARDED.cancelled_at(rid), SHARDED.tool_claim(rid, "c1"),
        SHARDED.call_starts(rid, "c1"), SHARDED.tool_results(rid), SHARDED.active_of(rid),
        SHARDED.running_calls_of(rid), shard_channel,
        SHARDED.conversation(rid), SHARDED.conversation_items(rid),
    )) == 1  # fmt: skip


def test_a_response_of_a_conversation_is_made_in_the_conversations_slot() -> None:
    cid = "conv_" + "cd" * 24
    rid = SHARDED.new_id_with_shard_of("resp_", cid)

    assert rid.startswith("resp_") and len(rid) == 5 + 48
    assert len(_slots(
        SHARDED.record(rid), SHARDED.active_of(rid), SHARDED.conversation(cid),
        SHARDED.conversation_items(cid), SHARDED.conversation_order(cid),
    )) == 1  # fmt: skip


def test_the_shards_spread_over_the_slots_and_the_sweeper_reads_every_one() -> None:
    assert len(_slots(*SHARDED.active_sets)) == CLUSTER_SHARDS
    assert len(set(SHARDED.running_call_sets)) == CLUSTER_SHARDS
    assert len(set(SHARDED.shard_channels)) == CLUSTER_SHARDS


def test_one_redis_keeps_its_keys_untagged() -> None:
    plain = Keys("antwort:")

    assert plain.record("resp_1") == "antwort:r:resp_1"
    assert plain.channel("resp_1") == "antwort:ev:resp_1"
    assert plain.active_of("resp_1") == plain.active == "antwort:active"
    assert plain.active_sets == ["antwort:active"]
    assert plain.running_calls_of("resp_1") == "antwort:calls:running"
    assert plain.conversation("conv_1") == "antwort:conv:conv_1"
    assert plain.history("resp_1", "resp_2") == "antwort:r:resp_1:hist:resp_2"


def test_a_response_that_continues_a_chain_is_made_in_its_previous_ones_slot() -> None:
    first = new_response_id(SHARDED)
    second = new_response_id(SHARDED, first)

    assert SHARDED.shard_of(second) == SHARDED.shard_of(first)
    # the chain's history lists (app.store.history), a branch's too, in the same slot
    assert len(_slots(
        SHARDED.record(second), SHARDED.history(first, first), SHARDED.history(first, second),
    )) == 1  # fmt: skip
    assert new_response_id(Keys("antwort:"), first) != first  # one Redis: any fresh id
