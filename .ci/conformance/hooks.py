"""Rules of the gateway's API that JSON Schema cannot state, for schemathesis.

/openapi.json states every constraint of a single field (ranges, lengths, patterns, formats,
enums, required members). The few rules left relate two fields, refer to data that must exist, or
depend on the clock; each is written in its operation's description, and here, so that the cases
schemathesis generates as *valid* follow them too. Only positive cases are changed: invalid cases
stay as generated, so the check that the server refuses them keeps its full force.
"""
from datetime import datetime, timedelta, timezone

import schemathesis
from schemathesis.core.parameters import ParameterLocation
from schemathesis.generation import GenerationMode

NOW = datetime.now(timezone.utc)
STAMP = "%Y-%m-%dT%H:%M:%SZ"


def _positive(case):
    """A case meant to be valid in every part (path, query, headers and body)."""
    meta = getattr(case, "meta", None)
    if meta is None:
        return True
    return meta.generation.mode == GenerationMode.POSITIVE and all(
        component.mode == GenerationMode.POSITIVE for component in meta.components.values())


def _parse(text):
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except (TypeError, ValueError):
        return None


def _not_future(value):
    """Feeds: a datapoint's (or a current value's) `at` is at most `maxFutureSkew` ahead."""
    if isinstance(value, dict):
        for key, member in list(value.items()):
            if key == "at" and isinstance(member, str):
                when = _parse(member)
                if when is not None and when.tzinfo is not None and when > NOW:
                    value[key] = NOW.strftime(STAMP)
            else:
                _not_future(member)
    elif isinstance(value, list):
        for member in value:
            _not_future(member)


def _distinct_times(value):
    """Feeds: the datapoints of one request are at distinct times."""
    if isinstance(value, dict):
        for member in value.values():
            _distinct_times(member)
    elif isinstance(value, list):
        seen = set()
        kept = []
        for member in value:
            if isinstance(member, dict) and "at" in member:
                if member["at"] in seen:
                    continue
                seen.add(member["at"])
            _distinct_times(member)
            kept.append(member)
        value[:] = kept


def _showing(showing):
    """Events: a showing's `end` is at or after its `start`, at most 400 days later; a venue it names exists."""
    if isinstance(showing, dict):
        if isinstance(showing.get("start"), str):
            if showing.get("end") is not None:
                showing["end"] = showing["start"]
        else:
            showing.pop("end", None)  # without a start, an end must be after the stored one
        showing.pop("venue", None)  # a venue must exist; a showing may have none


def _days(query):
    """Events: a range of days (`from`, `to`) ends on or after its first day, at most 366 days later;
    without `from` it starts today, so a `to` alone is paired with a `from` of the same day."""
    if not isinstance(query, dict) or not isinstance(query.get("to"), str):
        return
    if not isinstance(query.get("from"), str):
        query["from"] = query["to"]
        return
    try:
        first = datetime.strptime(query["from"], "%Y-%m-%d")
        last = datetime.strptime(query["to"], "%Y-%m-%d")
    except ValueError:
        return
    if not 0 <= (last - first).days <= 366:
        query["to"] = query["from"]


def _pair(members, first, second):
    """Both or neither: a venue's (or a feed search's) `lat` and `lon`."""
    if isinstance(members, dict) and (members.get(first) is not None) != (members.get(second) is not None):
        members.pop(first, None)
        members.pop(second, None)


def _history(query):
    """Feeds history: at most two of start, end and duration; interval needs start or duration
    (and the range at most 20,000 intervals); function needs interval."""
    if not isinstance(query, dict):
        return
    if all(name in query for name in ("start", "end", "duration")):
        query.pop("duration")
    if "interval" in query:
        if "start" not in query and "duration" not in query:
            query.pop("interval")
        else:
            # A whole day per interval keeps any range the document allows under the cap.
            query["interval"] = 86400
    if "function" in query and "interval" not in query:
        query.pop("function")


def _batch(body):
    """/v1/batch: call ids are unique, `dependsOn` names other calls without a cycle, and a call
    names an operation the gateway has with inputs that operation takes, or a method and a path."""
    if not isinstance(body, dict) or not isinstance(body.get("calls"), list):
        return
    for index, call in enumerate(body["calls"]):
        if not isinstance(call, dict):
            continue
        call["id"] = f"call{index}"
        call.pop("dependsOn", None)
        call.pop("operation", None)
        call.pop("input", None)
        if call.get("method") is None or call.get("path") is None:
            call["method"], call["path"] = "GET", "/healthz"


@schemathesis.hook("map_case")
def rules_between_fields(context, case):
    if not _positive(case):
        return case
    operation = f"{case.operation.method.upper()} {case.operation.path}"
    body = case.body
    query = case.query if isinstance(case.query, dict) else None

    if operation in ("POST /v1/events/{id}/showings", "PATCH /v1/events/showings/{id}"):
        _showing(body)
    elif operation in ("POST /v1/events", "PATCH /v1/events/{id}") and isinstance(body, dict):
        for showing in body.get("showings") or []:
            _showing(showing)
    elif operation in ("GET /v1/events", "GET /v1/events/near", "GET /v1/events.ics"):
        _days(query)
    elif operation in ("POST /v1/events/venues", "PATCH /v1/events/venues/{id}"):
        _pair(body, "lat", "lon")
    elif operation == "POST /v1/me/keys" and isinstance(body, dict) and isinstance(body.get("expiresAt"), str):
        body["expiresAt"] = (NOW + timedelta(days=30)).strftime(STAMP)  # a new key expires in the future
    elif operation == "POST /v1/auth/password-reset/form" and isinstance(body, dict) and "password" in body:
        body["confirm"] = body["password"]  # the form's two passwords are the same
    elif operation == "POST /v1/batch":
        _batch(body)
    elif operation == "GET /v1/feeds":
        _pair(query, "lat", "lon")
    elif operation.startswith(("GET /v1/feeds/{feed}/datastreams/{stream}", "DELETE /v1/feeds/{feed}/datastreams/{stream}/datapoints")):
        _history(query)
        if operation.startswith("DELETE") and query is not None and not any(n in query for n in ("start", "end", "duration")):
            query["duration"] = "1hour"  # a range delete names its range
    elif operation in ("POST /v1/feeds/triggers", "PUT /v1/feeds/triggers/{trigger}", "PATCH /v1/feeds/triggers/{trigger}"):
        if isinstance(body, dict) and body.get("type") in ("gt", "gte", "lt", "lte", "eq") and body.get("threshold") in (None, ""):
            body["threshold"] = 1  # a comparison has a threshold
    elif operation.startswith(("GET /v1/todo/", "POST /v1/todo/")):
        # A cursor is one a page of the same query gave; none starts at the first page.
        if query is not None:
            query.pop("cursor", None)
        if operation.endswith("/query") and isinstance(body, dict):
            body.pop("cursor", None)

    if operation.startswith(("POST /v1/feeds", "PUT /v1/feeds", "PATCH /v1/feeds")):
        _not_future(body)
        _distinct_times(body)
    return case


# ---- Bodies and parameters of the shipped plugins.yaml's data -----------------------------------

import os
import re

HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
# The bodies of three operations are files, whose validity JSON Schema cannot state.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CALENDAR = b"BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//conformance//EN\r\nEND:VCALENDAR\r\n"
# A GTFS-realtime FeedMessage with only its header (gtfs_realtime_version "2.0").
REALTIME = bytes([0x0A, 0x05, 0x0A, 0x03, 0x32, 0x2E, 0x30])


def _nameable(value):
    """Todo: an object's members (and those of objects inside it) are names a query can use."""
    if isinstance(value, dict):
        for key in list(value):
            if key == "" or key.startswith("$"):
                value.pop(key)
            else:
                _nameable(value[key])
    elif isinstance(value, list):
        for member in value:
            _nameable(member)


def _binary_file(case, data):
    """Sends `data` as the body of a positive case. Schemathesis re-checks a body a hook replaced
    against its schema, and takes any bytes for invalid (its validator reads no binary); this file
    is valid by construction, so the body keeps the mode it was generated with."""
    case.body = data
    meta = getattr(case, "_meta", None)
    if meta is not None:
        meta.clear_dirty(ParameterLocation.BODY)


FILE_OPERATIONS = ("POST /v1/events/import", "POST /v1/transit/feeds/{feed}/realtime", "PUT /v1/transit/feeds/{feed}")


def _body_is_negative(case):
    meta = getattr(case, "meta", None)
    return meta is not None and any(
        getattr(location, "name", str(location)).upper() == "BODY" and component.mode != GenerationMode.POSITIVE
        for location, component in meta.components.items())


@schemathesis.hook("map_case")
def data_of_the_shipped_configuration(context, case):
    operation = f"{case.operation.method.upper()} {case.operation.path}"
    if operation in FILE_OPERATIONS and _body_is_negative(case):
        # A file's schema is "any bytes": the invalid file of a negative case is one that is not
        # the format at all, which the server must refuse.
        case.body = b"\x00 not a file of this kind \xff"
        return case
    if not _positive(case):
        return case
    body = case.body
    query = case.query if isinstance(case.query, dict) else None
    path = case.path_parameters if isinstance(case.path_parameters, dict) else {}

    if operation == "POST /v1/batch" and isinstance(body, dict):
        for call in body.get("calls") or []:
            if isinstance(call, dict) and isinstance(call.get("headers"), dict):
                call["headers"] = {k: v for k, v in call["headers"].items() if HEADER_NAME.match(k)}
    elif operation == "PUT /v1/admin/configuration" and isinstance(body, dict):
        # A valid edit is a whole configuration that starts; the one at hand is the file itself
        # (applying it changes nothing, so the run goes on with the gateway it started).
        with open(os.environ["GATEWAY_CONFORMANCE_CONFIG"], encoding="utf-8") as config:
            body["text"] = config.read()
        body.pop("baseVersion", None)
    elif operation == "POST /v1/admin/cache/purge" and isinstance(body, dict):
        if body.get("all") is not True and not body.get("tags"):
            body["all"] = True  # a purge names tags, or all
    elif operation == "POST /v1/events/import":
        case.body = CALENDAR.decode()  # an iCalendar file (text, as its schema says)
    elif operation == "POST /v1/transit/feeds/{feed}/realtime":
        _binary_file(case, REALTIME)  # a GTFS-realtime feed
    elif operation == "PUT /v1/transit/feeds/{feed}":
        with open(os.path.join(ROOT, "data", "demo", "gtfs-sample.zip"), "rb") as sample:
            _binary_file(case, sample.read())  # a GTFS feed
        # An agency comes from one feed: the sample replaces the feed that serves it already.
        case.path_parameters = {**path, "feed": "gtfs-sample"}
    elif operation.startswith(("GET /v1/todo/", "POST /v1/todo/", "PUT /v1/todo/", "PATCH /v1/todo/")):
        # `where` holds conditions on field paths: none is a valid choice.
        if query is not None and "where" in query:
            query["where"] = "{}"
        if operation.endswith("/query") and isinstance(body, dict) and "where" in body:
            body["where"] = {}
        if "/objects" in operation and isinstance(body, dict) and not operation.endswith("/query"):
            if operation.startswith("PATCH"):
                for key in list(body):
                    if key == "" or (key.startswith("$") and key not in ("$set", "$unset", "$inc")):
                        body.pop(key)  # a member named with `$` is an update operator
                    elif not key.startswith("$"):
                        _nameable(body[key])
            else:
                _nameable(body)
            if path.get("bucket") == "todos" and not operation.startswith("PATCH"):
                body.setdefault("description", "conformance")  # the todos bucket's schema needs one
        if operation.startswith("PUT /v1/todo/groups/") and isinstance(body, dict):
            body.pop("users", None)  # members are users and groups that exist
            body.pop("groups", None)
    return case


# ---- Members the native API refuses as typos -----------------------------------------------------
# The feeds API refuses members it does not know (and ignores its read-only ones); the document
# lists the known ones, and a valid request sends no others.
FEED = {"datastreams", "description", "location", "private", "retention", "tags", "title", "website"}
DATASTREAM = {"id", "tags", "unit", "currentValue", "at"}
TRIGGER = {"feed", "datastream", "url", "type", "threshold"}
TODO_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,23}(\.[A-Za-z_][A-Za-z0-9_-]{0,23})*$")


def _only(members, known):
    if isinstance(members, dict):
        for key in list(members):
            if key not in known:
                members.pop(key)


@schemathesis.hook("map_case")
def members_the_api_knows(context, case):
    if not _positive(case):
        return case
    operation = f"{case.operation.method.upper()} {case.operation.path}"
    body = case.body
    if operation in ("POST /v1/feeds", "PUT /v1/feeds/{feed}", "PATCH /v1/feeds/{feed}"):
        _only(body, FEED)
        if isinstance(body, dict):
            for stream in body.get("datastreams") or []:
                _only(stream, DATASTREAM)
    elif operation.startswith(("POST /v1/feeds/{feed}/datastreams", "PUT /v1/feeds/{feed}/datastreams/{stream}")) and "datapoints" not in operation:
        if isinstance(body, dict) and isinstance(body.get("datastreams"), list):
            _only(body, {"datastreams"})
            for stream in body["datastreams"]:
                _only(stream, DATASTREAM)
        else:
            _only(body, DATASTREAM)
    elif operation in ("POST /v1/feeds/triggers", "PUT /v1/feeds/triggers/{trigger}", "PATCH /v1/feeds/triggers/{trigger}"):
        _only(body, TRIGGER)
    elif operation == "POST /v1/todo/buckets" and isinstance(body, dict):
        body.pop("index", None)  # an index names 1 to 4 field paths
    elif operation.startswith("PATCH /v1/todo/buckets/{bucket}/objects") and isinstance(body, dict):
        changed = set()  # a field path is changed by one operator at most
        for name in ("$set", "$unset", "$inc"):
            if isinstance(body.get(name), dict):
                body[name] = {k: v for k, v in body[name].items() if TODO_FIELD.match(k) and k not in changed}
                changed.update(body[name])
    return case
