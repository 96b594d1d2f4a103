"""The broker's gRPC endpoint seen through the project's own generated stubs (the official 5.x client's view is
tests/peers/test_rmq5_client.py): routes from the topic configs, clear statuses for what it cannot serve, offsets in
the table remoting uses, the Telemetry stream's answers, and a grpcListenPort in use named at start."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from servers import SMALL_BROKER_CONF, free_port, unique, wait_until

from spark_mq.broker.grpc.stubs import definition_pb2 as pb
from spark_mq.broker.grpc.stubs import service_pb2 as spb
from spark_mq.broker.grpc.stubs.service_pb2_grpc import MessagingServiceStub

pytestmark = pytest.mark.timeout(60)
CLIENT = (("x-mq-client-id", "test-client"),)


GRPC_PORT = free_port()


@pytest.fixture(scope="module")
def broker_conf() -> str:
    return f"enableGrpcEndpoint=true\ngrpcListenPort={GRPC_PORT}\n"


@pytest.fixture
def endpoint(broker, api):
    """(stub, broker, a new topic of 3 queues, the endpoint's port) of the module's broker."""
    topic = unique("GrpcTopic")
    api.create_topic(broker.addr, topic, 3, 3)
    with grpc.insecure_channel(f"127.0.0.1:{GRPC_PORT}") as channel:
        yield MessagingServiceStub(channel), broker, topic, GRPC_PORT


def test_route_names_this_endpoint_and_the_topics_queues(endpoint):
    stub, _, topic, port = endpoint
    route = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic)), timeout=5)
    assert route.status.code == pb.OK
    assert [q.id for q in route.message_queues] == [0, 1, 2]
    assert {q.permission for q in route.message_queues} == {pb.READ_WRITE}
    addresses = {(a.host, a.port) for q in route.message_queues for a in q.broker.endpoints.addresses}
    assert addresses == {("127.0.0.1", port)}
    missing = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="NoSuchTopic")), timeout=5)
    assert missing.status.code == pb.TOPIC_NOT_FOUND and "create it first" in missing.status.message


def test_route_and_assignment_name_every_broker_set_serving_grpc(endpoint, own_broker, api, namesrv):
    """The answering broker adds the NameServers' other sets of the topic at their masters' gRPC ports (announced in
    their runtime info); a set whose broker serves no gRPC is left out (a 5.x client cannot reach it)."""
    stub, broker, topic, port = endpoint
    other_port = free_port()
    other = own_broker("grpc_b", f"enableGrpcEndpoint=true\ngrpcListenPort={other_port}\n")
    remoting_only = own_broker("grpc_c")
    for b in (other, remoting_only):
        api.create_topic(b.addr, topic, 2, 2)
    assert api.get_broker_runtime_info(other.addr)["grpcListenPort"] == str(other_port)
    assert "grpcListenPort" not in api.get_broker_runtime_info(remoting_only.addr)
    wait_until(lambda: len(api.get_route_info(namesrv, topic).broker_datas) == 3, what="three sets routed")
    route = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic)), timeout=5)
    assert route.status.code == pb.OK
    by_set = {}
    for q in route.message_queues:
        by_set.setdefault(q.broker.name, set()).add((q.id, q.broker.endpoints.addresses[0].port))
    assert by_set == {broker.name: {(0, port), (1, port), (2, port)}, other.name: {(0, other_port), (1, other_port)}}
    assignment = stub.QueryAssignment(spb.QueryAssignmentRequest(topic=pb.Resource(name=topic),
                                                                 group=pb.Resource(name=unique("grpc_g"))), timeout=5)
    assert {(a.message_queue.broker.name, a.message_queue.broker.endpoints.addresses[0].port)
            for a in assignment.assignments} == {(broker.name, port), (other.name, other_port)}


def test_offsets_share_the_remoting_table(endpoint, api):
    stub, broker, topic, _ = endpoint
    group = unique("grpc_group")
    queue = pb.MessageQueue(topic=pb.Resource(name=topic), id=1)
    none = stub.GetOffset(spb.GetOffsetRequest(group=pb.Resource(name=group), message_queue=queue), timeout=5)
    assert none.status.code == pb.OFFSET_NOT_FOUND
    too_far = stub.UpdateOffset(spb.UpdateOffsetRequest(group=pb.Resource(name=group), message_queue=queue,
                                                        offset=5), timeout=5)
    assert too_far.status.code == pb.ILLEGAL_OFFSET  # the queue is empty: it ends at 0
    assert stub.UpdateOffset(spb.UpdateOffsetRequest(group=pb.Resource(name=group), message_queue=queue, offset=0),
                             timeout=5).status.code == pb.OK
    got = stub.GetOffset(spb.GetOffsetRequest(group=pb.Resource(name=group), message_queue=queue), timeout=5)
    assert (got.status.code, got.offset) == (pb.OK, 0)
    assert api.query_consumer_offset(broker.addr, group, topic, 1) == 0
    end = stub.QueryOffset(spb.QueryOffsetRequest(message_queue=queue, query_offset_policy=pb.END), timeout=5)
    assert (end.status.code, end.offset) == (pb.OK, 0)


def test_telemetry_answers_settings_and_refuses_what_a_client_does_not_send(endpoint):
    stub, _, topic, _ = endpoint
    settings = pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name=topic)]))
    commands = [spb.TelemetryCommand(settings=settings),
                spb.TelemetryCommand(verify_message_command=spb.VerifyMessageCommand(nonce="n")),
                spb.TelemetryCommand(thread_stack_trace=spb.ThreadStackTrace(nonce="n"))]
    answers = list(stub.Telemetry(iter(commands), metadata=CLIENT, timeout=5))
    assert len(answers) == 2, answers  # the thread-stack answer is dropped (the broker asked for none)
    assert answers[0].settings.publishing.max_body_size > 0 and answers[0].settings.backoff_policy.max_attempts > 0
    assert answers[1].status.code == pb.BAD_REQUEST
    no_id = list(stub.Telemetry(iter(commands[:1]), timeout=5))
    assert no_id[0].status.code == pb.CLIENT_ID_REQUIRED


def test_grpc_listen_port_in_use_is_named(tmp_path: Path, namesrv):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        conf = tmp_path / "broker.conf"
        conf.write_text(f"{SMALL_BROKER_CONF}enableGrpcEndpoint=true\ngrpcListenPort={port}\n")
        proc = subprocess.run([sys.executable, "-m", "spark_mq.cli", "broker", "-c", str(conf), "--namesrv", namesrv,
                               "--port", "0", "--store", str(tmp_path / "store"), "--metrics-port", "0"],
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert f"127.0.0.1:{port} (grpcListenPort) is already in use" in proc.stderr, proc.stderr[-2000:]


def test_a_received_message_forwarded_to_the_dlq(endpoint, api):
    stub, broker, topic, _ = endpoint
    group = unique("grpc_dlq")
    message = pb.Message(topic=pb.Resource(name=topic), body=b"poison",
                         system_properties=pb.SystemProperties(message_id="DLQ-1", message_type=pb.NORMAL))
    sent = stub.SendMessage(spb.SendMessageRequest(messages=[message]), timeout=5)
    assert sent.status.code == pb.OK and sent.entries[0].message_id == "DLQ-1"
    receive = spb.ReceiveMessageRequest(group=pb.Resource(name=group), batch_size=8,
                                        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1))
    (status, got, delivered) = list(stub.ReceiveMessage(receive, timeout=10))
    assert status.status.code == pb.OK and got.message.body == b"poison" and delivered.HasField("delivery_timestamp")
    forward = spb.ForwardMessageToDeadLetterQueueRequest(
        group=pb.Resource(name=group), topic=pb.Resource(name=topic), message_id="DLQ-1",
        receipt_handle=got.message.system_properties.receipt_handle, delivery_attempt=1, max_delivery_attempts=1)
    assert stub.ForwardMessageToDeadLetterQueue(forward, timeout=5).status.code == pb.OK
    assert api.get_max_offset(broker.addr, f"%DLQ%{group}", 0) == 1
    again = stub.ForwardMessageToDeadLetterQueue(forward, timeout=5)  # its receipt is spent
    assert again.status.code == pb.INVALID_RECEIPT_HANDLE
    missing = list(stub.ReceiveMessage(spb.ReceiveMessageRequest(
        group=pb.Resource(name=group), batch_size=1,
        message_queue=pb.MessageQueue(topic=pb.Resource(name="NoSuchTopic"), id=-1)), timeout=5))
    assert missing[0].status.code == pb.TOPIC_NOT_FOUND
