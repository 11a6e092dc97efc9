"""Scale-out: sessions split by session id over N spanscore processes score as one.

In front of N replicas, the Collector's `loadbalancing` exporter with
`routing_key: attributes` and `routing_attributes: [session.id]` sends every span of a
session to the same replica (deploy/loadbalancing). This is the property that relies
on: here a consistent hash of the session id splits 12 sessions of agent traces over 3
`spanscore run` processes, each sent with the OpenTelemetry SDK's OTLP exporter, and the
per-trace and per-session scores are the same as one process's on all the traffic.
"""

from __future__ import annotations

import hashlib

from tests.support.replicas import QUESTIONS, Replica, scores, send_sessions
from tests.support.running import wait_until

REPLICAS = 3
SESSIONS = 12


def replica_of(session_id: str, replicas: int) -> int:
    """Rendezvous hashing: the replica with the highest hash of (replica, session id)."""
    return max(range(replicas), key=lambda r: hashlib.sha256(f"{r}/{session_id}".encode()).digest())


def test_sessions_split_by_id_over_three_processes_score_as_one(tmp_path):
    sessions = [f"session-{n}" for n in range(SESSIONS)]
    replicas = [Replica(tmp_path, f"replica-{i}") for i in range(REPLICAS)] + [Replica(tmp_path, "single")]
    try:
        assert wait_until(lambda: all(r.healthy() for r in replicas), timeout_s=30), "spanscore did not come up"
        shards = [[s for s in sessions if replica_of(s, REPLICAS) == i] for i in range(REPLICAS)]
        assert all(shards), shards  # every replica gets some sessions
        for shard, replica in zip(shards, replicas):
            send_sessions(shard, replica.grpc)
        # The single process gets the same traffic, shard by shard: the same spans and ids.
        for shard in shards:
            send_sessions(shard, replicas[-1].grpc)
    finally:
        for replica in replicas:
            if replica.process.poll() is None:
                replica.stop()
    split_traces, split_sessions = scores([r.output for r in replicas[:-1]])
    single_traces, single_sessions = scores([replicas[-1].output])
    assert len(single_sessions) == SESSIONS and len(single_traces) == SESSIONS * len(QUESTIONS)
    assert split_sessions == single_sessions
    assert split_traces == single_traces
    # A loop is caught only when a session's turns meet on one replica: turn 2 repeats turn 1.
    assert sum(found["eval.loop_detection.label"] == "fail" for found in split_traces.values()) == SESSIONS
