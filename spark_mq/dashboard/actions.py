"""The console's actions (POST): create/update and delete a topic, send a test message, reset a group's offsets
to a time (or one queue's to an offset), delete a group, resend a message. Each needs an admin account
(:func:`web.action`); the destructive ones carry the operator's confirmation.
"""

from __future__ import annotations

from urllib.parse import quote

from starlette.responses import Response

from spark_mq.commands.common import parse_time_ms
from spark_mq.common.errors import ClientError
from spark_mq.common.message import Message
from spark_mq.common.names import validate_topic
from spark_mq.common.perm import PERM_READ, PERM_WRITE
from spark_mq.dashboard import messages
from spark_mq.dashboard.web import Visit, action, confirmed, form_of, redirect
from spark_mq.remoting.bodies import MessageQueue

PERMS = {"RW": PERM_READ | PERM_WRITE, "R-": PERM_READ, "-W": PERM_WRITE}


def _queues(form: dict[str, str], name: str) -> int:
    value = form.get(name, "8")
    if not value.isdigit() or not 1 <= int(value) <= 1024:
        raise ClientError(f"{name.replace('_', ' ')} {value!r}: give a number of queues from 1 to 1024")
    return int(value)


@action
async def save_topic(visit: Visit) -> Response:
    """Create a topic, or update its queues and permission (UPDATE_AND_CREATE_TOPIC on every master)."""
    form = await form_of(visit)
    name = form.get("topic", "")
    validate_topic(name)
    if form.get("perm", "RW") not in PERMS:
        raise ClientError(f"permission {form.get('perm')!r}: choose RW, R- or -W")
    await visit.admin.create_topic(name, read_queue_nums=_queues(form, "read_queues"),
                                   write_queue_nums=_queues(form, "write_queues"), perm=PERMS[form.get("perm", "RW")])
    return redirect(f"/topics/{quote(name, safe='')}", f"topic {name} saved")


@action
async def delete_topic(visit: Visit) -> Response:
    name = visit.request.path_params["topic"]
    confirmed(await form_of(visit))
    brokers = await visit.admin.delete_topic(name)
    return redirect("/topics", f"topic {name} deleted from {len(brokers)} broker(s) and the NameServers")


@action
async def send_test(visit: Visit) -> Response:
    name = visit.request.path_params["topic"]
    form = await form_of(visit)
    producer = await visit.state.clients.producer(visit.account)
    result = await producer.send(Message(name, form.get("body", "").encode(), tags=form.get("tags") or None,
                                         keys=form.get("keys") or None))
    return redirect(f"/topics/{quote(name, safe='')}",
                    f"sent: {result.msg_id} to queue {result.queue_id} at offset {result.queue_offset}")


@action
async def reset_offsets(visit: Visit) -> Response:
    name = visit.request.path_params["group"]
    form = await form_of(visit)
    confirmed(form)
    topic = form.get("topic", "")
    when = form.get("time", "")
    timestamp = -1 if when == "end" else parse_time_ms(when or "0", "reset time")
    offsets = await visit.admin.reset_offsets_by_time(name, topic, timestamp)
    return redirect(f"/groups/{quote(name, safe='')}",
                    f"{len(offsets)} queue(s) of {topic} reset; total offset now {sum(offsets.values())}")


@action
async def set_offset(visit: Visit) -> Response:
    """One queue's committed offset set by hand (a group with no member online)."""
    name = visit.request.path_params["group"]
    form = await form_of(visit)
    confirmed(form)
    queue_id, offset = form.get("queue", ""), form.get("offset", "")
    if not (queue_id.isdigit() and offset.isdigit()):
        raise ClientError(f"queue {queue_id!r} and offset {offset!r}: give whole numbers")
    queue = MessageQueue(form.get("topic", ""), form.get("broker", ""), int(queue_id))
    await visit.admin.set_offset(name, queue, int(offset))
    return redirect(f"/groups/{quote(name, safe='')}",
                    f"offset of queue {queue.queue_id} of {queue.topic} on {queue.broker_name} set to {offset}")


@action
async def delete_group(visit: Visit) -> Response:
    name = visit.request.path_params["group"]
    confirmed(await form_of(visit))
    brokers = await visit.admin.delete_group(name)
    return redirect("/groups", f"group {name} deleted from {len(brokers)} broker(s)")


@action
async def resend(visit: Visit) -> Response:
    form = await form_of(visit)
    found = await visit.admin.view_message(form.get("msgid", ""), form.get("topic") or None)
    if found is None:
        raise ClientError(f"message {form.get('msgid')} is no longer stored")
    producer = await visit.state.clients.producer(visit.account)
    result = await messages.resend(producer, found, form.get("group") or None)
    return redirect(f"/messages?msgid={quote(found.msg_id)}",
                    f"resent as {result.msg_id} to {result.topic}")
