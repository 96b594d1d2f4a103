"""The console's pages (GET): overview, topics, groups, messages, the controller's view and held
messages. Each is a view model from its module rendered by a template; none changes the cluster.
"""

from __future__ import annotations

import time

from starlette.responses import Response

from spark_mq.commands.common import parse_time_ms
from spark_mq.common.errors import ClientError
from spark_mq.dashboard import cluster, groups, internals, messages, topics
from spark_mq.dashboard.charts import line_chart
from spark_mq.dashboard.web import Visit, page

HOUR_MS = 3_600_000


def _int(visit: Visit, name: str, default: int) -> int:
    value = visit.request.query_params.get(name, "")
    return int(value) if value.isdigit() else default


@page
async def overview(visit: Visit) -> Response:
    sampler = visit.state.sampler
    view = await cluster.overview(visit.admin, sampler)
    chart = line_chart([("in (produced)", sampler.messages_in), ("out (consumed)", sampler.messages_out)], "msg/s")
    return visit.render("overview.html", view=view, chart=chart, sampler=sampler)


@page
async def topic_list(visit: Visit) -> Response:
    q = visit.request.query_params
    kind = topics.TopicKind(q["kind"]) if q.get("kind") in {k.value for k in topics.TopicKind} else None
    listing = topics.page_of(await visit.admin.list_topics(), kind, q.get("q", ""), _int(visit, "page", 1))
    return visit.render("topics.html", page=listing, kind=kind, kinds=list(topics.TopicKind), q=q.get("q", ""),
                        kind_of=topics.kind_of)


@page
async def topic(visit: Visit) -> Response:
    name = visit.request.path_params["topic"]
    detail = await topics.topic_detail(visit.admin, name, visit.account.admin, visit.state.archive_root)
    if detail is None:
        raise ClientError(f"topic {name!r} is not known to the NameServers")
    return visit.render("topic.html", topic=detail)


@page
async def group_list(visit: Visit) -> Response:
    sampler = visit.state.sampler
    known = await visit.admin.groups() if visit.account.admin else dict(sampler.groups)
    q = visit.request.query_params.get("q", "")
    listing = topics.page_of(sorted(known), None, q, _int(visit, "page", 1))
    lag = {g: s[-1].value for g, s in sampler.group_lag.items() if s}
    return visit.render("groups.html", page=listing, q=q, topics_of=known, lag=lag)


@page
async def group(visit: Visit) -> Response:
    name = visit.request.path_params["group"]
    detail = await groups.group_detail(visit.admin, name)
    chart = line_chart([("total lag", visit.state.sampler.group_lag.get(name, ()))], "messages")
    return visit.render("group.html", group=detail, chart=chart)


@page
async def message_search(visit: Visit) -> Response:
    q = visit.request.query_params
    topic, key, msg_id = q.get("topic", ""), q.get("key", ""), q.get("msgid", "")
    now = int(time.time() * 1000)
    begin = parse_time_ms(q["begin"], "begin") if q.get("begin") else now - HOUR_MS
    end = parse_time_ms(q["end"], "end") if q.get("end") else now + 1000
    found = None
    if msg_id:
        hit = await visit.admin.view_message(msg_id, topic or None)
        if hit is None:
            raise ClientError(f"no message has id {msg_id}" + ("" if topic else ": if it is a producer msgId "
                                                                         "(UNIQ_KEY), give its topic too"))
        consumed = await messages.consumed_by(visit.admin, hit) if visit.account.admin else None
        return visit.render("message.html", found=hit, body=messages.body_views(hit.message.body),
                            origin=messages.origin_topic(hit.message), topic=topic, consumed=consumed)
    if topic and key:
        found = await messages.by_key(visit.admin, topic, key, begin, end)
    elif topic:
        found = await messages.by_time(visit.admin, topic, begin, end)
    return visit.render("messages.html", found=found, topic=topic, key=key, begin=q.get("begin", ""),
                        end=q.get("end", ""), limit=messages.SEARCH_MAX)


@page
async def controller(visit: Visit) -> Response:
    controllers = await internals.controller(visit.admin, visit.state.controller_addrs)
    held = await internals.held_messages(visit.admin)
    return visit.render("internals.html", controllers=controllers, held=held, in_flight=internals.in_flight_of(held),
                        controller_addrs=visit.state.controller_addrs)
