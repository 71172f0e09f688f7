"""The rule table: for every API the gateway forwards, what Kafka requires (AUTHORIZER.md's table, as KafkaApis
decides it) and which resource-bearing fields of its request (:mod:`quotaflow.gateway.auth.resources`, found in
Kafka's own message definitions) the gateway's planner (``authorize.PLANNERS``) reads to decide it.

The versions the gateway offers follow from it (:func:`covered_range`): a version whose request carries a
resource-bearing field its row does not cover (a topic id where the planner reads names, a batched form the
planner does not read) is not offered, and the gate (``versions.gate_table``) refuses it; an API without a row, or
without a message definition, is not offered at all. A new field, version or API is therefore refused until
someone writes down how it is authorized.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from kafka.protocol.api_key import ApiKey

from quotaflow.gateway.auth import resources
from quotaflow.gateway.wire import protocol


@dataclass(frozen=True, slots=True)
class Rule:
    """One API: ``needs`` (what Kafka requires, in words) and ``covers`` (resource-bearing field path -> how the
    planner decides it)."""

    needs: str
    covers: Mapping[str, str] = field(default_factory=dict)


_TXN_ID = "WRITE on the transactional id (53)"
_PID = "the producer id of the transactional id checked: the coordinator matches them, no ACL of its own"
_PLACEMENT = "broker ids of a replica placement: no ACL of their own in Kafka (the topic's operation decides)"
_UPSTREAM = "SASL passthrough only: the cluster authenticates and authorizes the client's own principal"
_UPSTREAM_ACL = ("the cluster decides, but a topic (or ANY) pattern or filter naming quotaflow's topics is refused"
                 " whole (31) at the gateway: authorize._acl_resources")

RULES: Final[Mapping[int, Rule]] = {
    ApiKey.Produce: Rule("WRITE per topic (29); WRITE on the transactional id (53)", {
        "TransactionalId": _TXN_ID,
        "TopicData.Name": "topic_names.produce_topics: every topic's name, WRITE each",
    }),
    ApiKey.Fetch: Rule("READ per topic (29); CLUSTER_ACTION for a follower's fetch (31)", {
        "ReplicaId": "replica_id >= 0 (a follower) needs CLUSTER_ACTION",
        "Topics.Topic": "topic_names.fetch_topics: every topic's name, READ each",
        "ForgottenTopicsData.Topic": "fetch-session bookkeeping, nothing read from it: with an authorizer sessions"
                                     " are off (sessionless_fetch); without one, quotaflow's names are searched in"
                                     " the whole frame",
    }),
    ApiKey.ListOffsets: Rule("DESCRIBE per topic (29)", {
        "Topics.Name": "DESCRIBE each",
        "ReplicaId": "picks the offset view (consumer, debug or follower): Kafka authorizes the topics only",
    }),
    ApiKey.Metadata: Rule("DESCRIBE per topic (29), listings filtered; CREATE for auto-creation", {
        "Topics.Name": "DESCRIBE each",
        "Topics.TopicId": "an entry named by id alone is refused (29): the gateway authorizes names; an id sent"
                          " beside a name is refused too (authorize._names_only)",
    }),
    ApiKey.OffsetCommit: Rule("READ on the group (30), READ per topic (29)", {
        "GroupId": "READ", "Topics.Name": "READ each",
    }),
    ApiKey.OffsetFetch: Rule("DESCRIBE on the group (30), DESCRIBE per topic (29), listings filtered", {
        "GroupId": "DESCRIBE", "Topics.Name": "DESCRIBE each",
        "Groups.GroupId": "DESCRIBE each group (v8+)", "Groups.Topics.Name": "DESCRIBE each",
    }),
    ApiKey.FindCoordinator: Rule("DESCRIBE on the group or transactional id, by key type", {
        "Key": "by KeyType: group (30) or transactional id (53); share groups refused (31)",
        "CoordinatorKeys": "each, as Key",
    }),
    ApiKey.JoinGroup: Rule("READ on the group (30)", {"GroupId": "READ"}),
    ApiKey.Heartbeat: Rule("READ on the group (30)", {"GroupId": "READ"}),
    ApiKey.LeaveGroup: Rule("READ on the group (30)", {"GroupId": "READ"}),
    ApiKey.SyncGroup: Rule("READ on the group (30)", {"GroupId": "READ"}),
    ApiKey.DescribeGroups: Rule("DESCRIBE per group", {"Groups": "DESCRIBE each"}),
    ApiKey.ListGroups: Rule("DESCRIBE on the cluster, else the listing filtered by DESCRIBE per group"),
    ApiKey.CreateTopics: Rule("CREATE on the cluster or per topic (29)", {
        "Topics.Name": "CREATE each", "Topics.Assignments.BrokerIds": _PLACEMENT,
    }),
    ApiKey.DeleteTopics: Rule("DELETE per topic (29)", {"TopicNames": "DELETE each (v0-5)"}),
    ApiKey.DeleteRecords: Rule("DELETE per topic (29)", {"Topics.Name": "DELETE each"}),
    ApiKey.InitProducerId: Rule("WRITE on the transactional id (53), else IDEMPOTENT_WRITE or WRITE on a topic", {
        "TransactionalId": _TXN_ID, "ProducerId": _PID,
    }),
    ApiKey.OffsetForLeaderEpoch: Rule("DESCRIBE per topic (29); CLUSTER_ACTION for a follower (31)", {
        "Topics.Topic": "DESCRIBE each",
        "ReplicaId": "replica_id >= 0 (a follower) needs CLUSTER_ACTION (authorize._follower_epochs)",
    }),
    ApiKey.AddPartitionsToTxn: Rule("WRITE on the transactional id (53), WRITE per topic (29)", {
        # v4+ is the brokers' batched form (Transactions[], CLUSTER_ACTION): not read, so not offered
        "V3AndBelowTransactionalId": _TXN_ID, "V3AndBelowProducerId": _PID,
        "V3AndBelowTopics.Name": "WRITE each",
    }),
    ApiKey.AddOffsetsToTxn: Rule("WRITE on the transactional id (53), READ on the group (30)", {
        "TransactionalId": _TXN_ID, "ProducerId": _PID, "GroupId": "READ",
    }),
    ApiKey.EndTxn: Rule("WRITE on the transactional id (53)", {"TransactionalId": _TXN_ID, "ProducerId": _PID}),
    ApiKey.TxnOffsetCommit: Rule("WRITE on the transactional id (53), READ on the group (30), READ per topic", {
        "TransactionalId": _TXN_ID, "ProducerId": _PID, "GroupId": "READ", "Topics.Name": "READ each",
    }),
    ApiKey.DescribeAcls: Rule(_UPSTREAM, {"ResourceNameFilter": _UPSTREAM_ACL}),
    ApiKey.CreateAcls: Rule(_UPSTREAM, {"Creations.ResourceName": _UPSTREAM_ACL}),
    ApiKey.DeleteAcls: Rule(_UPSTREAM, {"Filters.ResourceNameFilter": _UPSTREAM_ACL}),
    ApiKey.DescribeUserScramCredentials: Rule(_UPSTREAM, {"Users.Name": _UPSTREAM}),
    ApiKey.AlterUserScramCredentials: Rule(_UPSTREAM, {"Deletions.Name": _UPSTREAM, "Upsertions.Name": _UPSTREAM}),
    ApiKey.DescribeConfigs: Rule("DESCRIBE_CONFIGS per resource (topic 29, cluster 31, group 30)", {
        "Resources.ResourceName": "by ResourceType: topic, broker/logger/client-metrics (cluster), group; any"
                                  " other type refused (31)",
    }),
    ApiKey.AlterConfigs: Rule("ALTER_CONFIGS per resource", {"Resources.ResourceName": "as DescribeConfigs"}),
    ApiKey.IncrementalAlterConfigs: Rule("ALTER_CONFIGS per resource",
                                         {"Resources.ResourceName": "as DescribeConfigs"}),
    ApiKey.DescribeLogDirs: Rule("DESCRIBE on the cluster (31); quotaflow's topics left out", {
        "Topics.Topic": "the cluster decides; quotaflow's topics stripped from the answer",
    }),
    ApiKey.CreatePartitions: Rule("ALTER per topic (29)", {
        "Topics.Name": "ALTER each", "Topics.Assignments.BrokerIds": _PLACEMENT,
    }),
    ApiKey.DeleteGroups: Rule("DELETE per group (30)", {"GroupsNames": "DELETE each"}),
    ApiKey.ElectLeaders: Rule("ALTER per topic", {"TopicPartitions.Topic": "ALTER each"}),
    ApiKey.AlterPartitionReassignments: Rule("ALTER per topic", {
        "Topics.Name": "ALTER each", "Topics.Partitions.Replicas": _PLACEMENT,
    }),
    ApiKey.ListPartitionReassignments: Rule("DESCRIBE on the cluster; quotaflow's topics left out", {
        "Topics.Name": "quotaflow's topics removed from the request and the answer",
    }),
    ApiKey.OffsetDelete: Rule("DELETE on the group (30), READ per topic (29)", {
        "GroupId": "DELETE", "Topics.Name": "READ each",
    }),
    ApiKey.DescribeQuorum: Rule("DESCRIBE on the cluster (31)", {
        "Topics.TopicName": "the metadata log's name: Kafka needs DESCRIBE on the cluster only",
    }),
    ApiKey.UpdateFeatures: Rule("ALTER on the cluster (31)"),
    ApiKey.DescribeCluster: Rule("DESCRIBE on the cluster for its authorized operations"),
    ApiKey.DescribeProducers: Rule("READ per topic (29)", {"Topics.Name": "READ each"}),
    ApiKey.DescribeTransactions: Rule("DESCRIBE per transactional id (53)", {"TransactionalIds": "DESCRIBE each"}),
    ApiKey.ListTransactions: Rule("the listing filtered by DESCRIBE per transactional id", {
        "ProducerIdFilters": "a filter on the listing, which is filtered by DESCRIBE per transactional id",
    }),
    ApiKey.ListConfigResources: Rule("DESCRIBE_CONFIGS on the cluster (31)"),
    ApiKey.DescribeTopicPartitions: Rule("DESCRIBE per topic (29), listings filtered", {
        "Topics.Name": "DESCRIBE each",
        "Cursor.TopicName": "where a listing starts: what it lists is filtered by DESCRIBE, quotaflow's topics out",
    }),
    # answered by the gateway, or forwarded with no resource in them
    ApiKey.ApiVersions: Rule("none"),
    ApiKey.SaslHandshake: Rule("none (authentication)"),
    ApiKey.SaslAuthenticate: Rule("none (authentication)"),
}


def uncovered(api_key: int, version: int) -> list[resources.ResourceField]:
    """The resource-bearing fields of this request version its rule does not cover (every one without a rule)."""
    cls = protocol.REQUESTS.get(api_key)
    if cls is None:
        return []
    rule = RULES.get(api_key)
    covers = {} if rule is None else rule.covers
    return [f for f in resources.fields_at(cls, version) if f.path not in covers]


@functools.cache
def covered_range(api_key: int) -> tuple[int, int] | None:
    """The versions of ``api_key`` the gateway can authorize: from the first version of Kafka's definition up to
    the last before one with a resource-bearing field the rule table does not cover. None: no definition, no rule,
    or its first version already carries such a field."""
    cls = protocol.REQUESTS.get(api_key)
    valid = resources.valid_versions(cls)
    if valid is None or api_key not in RULES:
        return None
    lo, hi = valid
    top = lo - 1
    for version in range(lo, hi + 1):
        if uncovered(api_key, version):
            break
        top = version
    return (lo, top) if top >= lo else None
