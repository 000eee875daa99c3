"""schemathesis 4.32.5 hooks for the threadstream runs (tests/blackbox/schemathesis.rs loads this
file through SCHEMATHESIS_HOOKS). docs/openapi.md ("Hooks") says why each exists. Six:

1. A fresh Idempotency-Key per request. The server executes a request once per key: a key used
again for a different request is refused (422 `idempotency_key_reused`), and one whose first
request is still running is 409 `idempotency_key_in_use` (docs/protocol.md, Idempotency-Key).
schemathesis draws keys from a small space (`0`, `A`, …) and sends the same key with different
bodies, so without this hook those routes would answer 422 to schema-valid requests, and the
config had to count 409 and 422 as accepted there, which hid real errors. The hook only makes a
key that is valid as documented (1 to 255 visible ASCII characters, not `""`) unique, by putting a
counter in front of what schemathesis drew (cut to 255): the request stays schema-valid and
keeps the drawn characters. A key the coverage phase breaks on purpose (empty, too long,
control characters) is left as it is, so the 400 `invalid_idempotency_key` is still tested.

2. Link values (and drawn `%XX` text that would reach the server as a control character)
percent-encoded in paths, and judged by schemathesis as the
server reads them, not as encoded (below, before `_encode_link_path_parameters`).

3. A deserializer for `application/x-ndjson` (below, before `deserialize_ndjson`).

4. Text bodies sent as bytes (below, before the `serializer.alias`).

5. Durable Streams headers that depend on each other, kept together in positive cases of the
three writes that take them (below, before `durable_streams_header_dependencies`). OpenAPI
parameters cannot say that one header needs or excludes another: Producer-Id, Producer-Epoch
and Producer-Seq come together, Stream-TTL excludes Stream-Expires-At, Stream-Fork-Sub-Offset
needs Stream-Forked-From, and an append without a body is a close (`Stream-Closed: true`). In a
case schemathesis calls positive, and that is positive by the document once schemathesis
revalidates its headers, the hook drops the header that breaks such a rule (a partial producer
set, one of TTL and Expires-At, a sub-offset without a fork) and gives a body-less append
`Stream-Closed: true`; negative cases are sent as drawn. With it, "schema-valid request
accepted" runs on those three operations as on every other.

6. A subscription's webhook URL on this machine, in positive cases of a subscription create
(below, before `subscription_webhook_on_loopback`). Which URLs a webhook may name is the
server's `--webhook-targets` configuration, not the document's (the tests' servers run
`loopback`); a positive case's `webhook.url` is sent as `http://127.0.0.1:<the server's
port>/hook`, which every policy accepts. Nothing else is changed.
"""

import itertools
import json
import re
import uuid
from urllib.parse import quote, unquote, urlsplit

import schemathesis
from schemathesis import GenerationMode
from schemathesis.core.parameters import ParameterLocation

# As the document says (and `api::idempotency` checks): 1 to 255 visible ASCII characters.
_VALID_KEY = re.compile(r'^(?!""$)[!-~]{1,255}$')
# Unique across both runs of one test binary and across restarts of a run.
_RUN = uuid.uuid4().hex[:8]
_COUNTER = itertools.count()


@schemathesis.hook
def before_call(context, case, kwargs):
    _encode_link_path_parameters(case)
    headers = case.headers
    if not headers:
        return
    for name in list(headers):
        if name.lower() != "idempotency-key":
            continue
        value = headers[name]
        if isinstance(value, str) and _VALID_KEY.match(value):
            headers[name] = f"st-{_RUN}-{next(_COUNTER)}-{value}"[:255]


# Path parameters the stateful phase takes from links, percent-encoded as they are.
#
# A link carries a raw value (a `threadId` of `%12` from an earlier request's query, the `id` of
# a created thread) into the next request's path, and schemathesis 4.32.5 encodes path
# parameters, a link's values included, when it draws the case, by decoding them first
# (`transport.serialization.quote_all`: `unquote`, then `quote`, to keep already-encoded
# generated values as they are). A raw value holding `%XX`
# therefore reaches the server decoded: the id `%12` is sent as the path bytes `%12`, which is
# U+0012, and the server's rightful 400 `invalid_thread_id` is then reported as a schema-valid
# request rejected (or a created thread as not found). The hook remembers every string the run
# sent in a query or a body and every string of a JSON answer; in the stateful phase, a path
# parameter whose encoded form is one of those raw strings (and whose decoded form is not) is a
# link's raw value, and is sent percent-encoded as itself (`%12` as `%2512`). Nothing else is
# changed: generated path parameters, and every other phase, are as schemathesis drew them.
# A string the server answered with (a thread's id in a list, say) is always a raw value, even
# when its decoded form was sent in some earlier request too (the seeded draws can make both: a
# thread created with the id `%C2%9C%02…`, and a body holding `\x9c\x02…`), so it is encoded
# whatever else was seen. But not a string the answer only echoes from its own request's query
# (`GET /api/v1/agent/history?threadId=…` and an attachment's upload answer the `threadId` they
# were asked for, whether a thread has it or not): that names what was asked, not something the
# server holds. Counted as answered, an echo made every id ambiguous whose encoded form schemathesis
# had drawn as text and sent in a query (seen: drawn seed 944602905, the thread `U0ëå…` created,
# then a query echoing the text `U0%C3%AB…`; the link's id was sent encoded twice, the server
# rightly answered 404 for that other id, and schemathesis reported a created thread not found).
#
# The hook cannot see every place a raw value comes from: schemathesis also draws path parameters
# from a pool of values captured from earlier answers (an SSE event, say) that are not JSON to
# this hook. So, also: in a positive case (schemathesis meant a schema-valid value), a path
# parameter whose decoded form holds a control character, which every path parameter's documented
# pattern forbids, while its encoded form holds none, can only be a raw value that `quote_all`
# would decode: it is sent encoded as itself. (Seen: a stateful GET of
# `/api/v1/agent/runs/{thread_id}/events` with the thread id `%F1%8A%93%8A%C2%9C%02…` sent as
# control characters and answered 400, reported as a schema-valid request rejected.) This rule
# holds in every phase, not only the stateful one: the generator itself can draw `%XX` text for a
# pattern that allows `%` (every printable character), and `quote_all` keeps it as if encoded
# (seen: drawn seed 260812945, fuzzing phase, a thread id drawn as `%C2%98Ç` sent as
# `%C2%98%C3%87`, which the server reads as U+0098 + `Ç`, and answered 400).
#
# Which value schemathesis judges. It revalidates the path parameters a `before_call` hook
# changed, against the document, taking each string as `case.path_parameters` holds it, which is
# the form sent on the wire (the generator's `quote_all` left it percent-encoded), not the value
# the server reads from it. Judged so, an encoded value is not the one the server gets: a raw
# thread id `%C3%B3%C4%B0…` of 99 characters, valid, sent encoded as `%25C3%25B3…`, was judged as
# those 163 characters, more than `ThreadId`'s 128; the positive case turned negative (its
# description still "Positive test case"), and the server's rightful 200, 201 or 204 was reported
# as a schema-violating request accepted (seen: drawn seed 186525400, ST201 "Invalid component:
# positive test case" on four operations). So the hook has schemathesis judge the value the server
# reads: it hands the case back its path parameters before encoding them (a link's raw value is
# what the server decodes from the encoded form), which schemathesis revalidates with its own
# validator; then it sets the encoded values, and in place of their revalidation (of the encoded
# strings) keeps that verdict for the path, the case's mode following from its components as
# schemathesis derives it (positive when every one is). A value the server reads as invalid (one
# longer than its schema allows, say) makes the case negative, as it should; nothing else in the
# case or its checks changes.
_SEEN = set()
_ANSWERED = set()
_CONTROL = re.compile("[\u0000-\u001f\u007f-\u009f]")


def _strings(value, out):
    if isinstance(value, str):
        out.add(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            _strings(k, out)
            _strings(v, out)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _strings(v, out)


@schemathesis.hook
def after_call(context, case, response):
    _strings(case.query, _SEEN)
    _strings(case.body, _SEEN)
    asked = set()
    _strings(case.query, asked)
    # Parsed here, not with `response.json()`: that caches the parse as the response's
    # deserialized body, which the schema check would then use whatever the media type.
    answered = set()
    try:
        _strings(json.loads(response.content), answered)
    except Exception:
        pass
    # The query's own values echoed back are not answers (above).
    _ANSWERED.update(answered - asked)


def _encode_link_path_parameters(case):
    meta = case.meta
    if meta is None or not case.path_parameters:
        return
    stateful = meta.phase.name == "stateful"
    # A path parameter schemathesis broke on purpose is sent as drawn: re-encoded, a drawn
    # control character would become a valid `%XX` (seen: a negative stateful case of `GET
    # /api/v1/agent/runs/{thread_id}/events` whose id `%07%10…` was also a created thread's,
    # answered 200 and reported as a schema-violating request accepted).
    if meta.is_negative_at(ParameterLocation.PATH):
        return
    encoded = {}
    for name, value in case.path_parameters.items():
        if not isinstance(value, str):
            continue
        decoded = unquote(value)
        seen = lambda v: v in _SEEN or v in _ANSWERED
        if stateful and decoded != value and (
            value in _ANSWERED or (seen(value) and not seen(decoded))
        ):
            encoded[name] = quote(value, safe="")
        elif _CONTROL.search(decoded) and not _CONTROL.search(value):
            encoded[name] = quote(value, safe="")
    if not encoded:
        return
    # schemathesis judges the path by the values the server reads (above, "Which value").
    case.path_parameters = dict(case.path_parameters)
    judged = case.meta.components.get(ParameterLocation.PATH)
    case.path_parameters = {**case.path_parameters, **encoded}
    meta = case.meta
    if judged is not None:
        meta.components[ParameterLocation.PATH] = judged
        positive = all(component.mode.is_positive for component in meta.components.values())
        meta.generation.mode = GenerationMode.POSITIVE if positive else GenerationMode.NEGATIVE


# Durable Streams headers that constrain each other (docs/protocol.md, "Durable Streams"), on the
# three writes that take them. Each header is a parameter of its own, and OpenAPI cannot say that
# one needs or excludes another (nor that a header decides whether the body may be empty), so
# schemathesis draws any combination and calls it schema-valid; the server refuses a broken one
# with 400, as the protocol requires. Before a positive case is sent, this hook makes its headers
# keep those rules; a negative case is sent as drawn.
#
# - `Producer-Id`, `Producer-Epoch` and `Producer-Seq` come together (else 400
#   `incomplete_producer_headers`): a partial set is dropped, so all three or none are sent
#   (`POST /v1/stream/{path}`, `POST /v1/threads/{thread_id}`).
# - `Stream-TTL` or `Stream-Expires-At`, not both (else 400 `ttl_and_expiry`): one of the two is
#   dropped, each in turn, so both stay tested (`PUT /v1/stream/{path}`).
# - `Stream-Fork-Sub-Offset` needs `Stream-Forked-From` (else 400 `sub_offset_without_fork`): it
#   is dropped without it (`PUT`). `Stream-Fork-Offset` alone is no error (it means something only
#   in a fork), so it stays.
# - An append with no body is a close: it needs `Stream-Closed: true` (else 400 `empty_body`, "an
#   empty body only closes"). A positive `POST /v1/stream/{path}` that sends no body (none drawn,
#   or an empty string or bytes) is sent with `Stream-Closed: true`, the one value that makes it
#   the request the document describes ("`true`: close the stream (after this body, if any)").
#
# Nothing else is changed: no value is invented but that `true`, no case is skipped, and the
# statuses counted as accepted are schemathesis's defaults. Every edit keeps each header in its
# documented form (only optional headers are dropped), and schemathesis checks that: it
# revalidates the headers a `before_call` hook hands back (`case.headers = …`) against the
# document before the request goes out.
#
# That revalidation is also asked for first, on the headers as drawn, because schemathesis 4.32.5
# can call a case positive whose headers break a documented form: with NUL bytes refused in
# headers (its probe of this server), its coverage phase draws `Stream-Fork-Offset: ""`, which
# the documented pattern `^0*(…)_[0-9]+$` refuses, in most of the cases it calls positive (28 of
# 36 for `PUT /v1/stream/{path}`, seed 22); the server's rightful 400 `invalid_fork_offset` was
# then reported as a schema-valid request rejected. Revalidated, such a case is negative, is sent
# as drawn, and is held to the negative checks (a schema-violating request must be refused).
_PRODUCER = ("producer-id", "producer-epoch", "producer-seq")
_LIFETIME = itertools.cycle(("stream-expires-at", "stream-ttl"))


@schemathesis.hook("before_call").apply_to(
    name=["POST /v1/stream/{path}", "PUT /v1/stream/{path}", "POST /v1/threads/{thread_id}"]
)
def durable_streams_header_dependencies(context, case, kwargs):
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive:
        return
    # Positive by the document, not only by the generator (above).
    case.headers = case.headers
    if not case.meta.generation.mode.is_positive:
        return
    headers = case.headers
    names = {name.lower(): name for name in headers}
    drop = []
    producer = [h for h in _PRODUCER if h in names]
    if 0 < len(producer) < len(_PRODUCER):
        drop += producer
    if "stream-ttl" in names and "stream-expires-at" in names:
        drop.append(next(_LIFETIME))
    if "stream-fork-sub-offset" in names and "stream-forked-from" not in names:
        drop.append("stream-fork-sub-offset")
    for name in drop:
        del headers[names[name]]
    if case.operation.label == "POST /v1/stream/{path}" and not _sends_body(case):
        closed = names.get("stream-closed", "Stream-Closed")
        if headers.get(closed) != "true":
            headers[closed] = "true"
    case.headers = headers


def _sends_body(case):
    """Whether the request carries a body of at least one byte, as schemathesis serializes it."""
    kwargs = case.as_transport_kwargs()
    return "json" in kwargs or bool(kwargs.get("data"))


# A subscription's webhook URL, on a subscription create (`PUT /v1/stream/__ds/subscriptions/{id}`).
# The document says everything the create checks of its body but the webhook URL policy: a
# `webhook` subscription's `webhook.url` must be allowed by the server's `--webhook-targets`
# (else 400 `WEBHOOK_URL_REJECTED`), which is the server's configuration, not the document's
# (`public`: `http` only to localhost or 127.x, otherwise `https` and not to a private address;
# `loopback`, which the tests' servers run: `http` or `https` to localhost or 127.x only). In a
# case that is positive by the document (revalidated first, as above), a `webhook` subscription's
# URL is sent as `http://127.0.0.1:<port>/hook`, `<port>` the server's own: both policies take
# it, it stays within the document (a string, not empty; schemathesis revalidates the edited
# body), and a wake delivered to it reaches the server under test, which refuses it (no such
# route), not some other process: a failed delivery, retried as any is. The case's other values,
# negative cases and pull-wake subscriptions are sent as drawn; the policy itself is tested by
# tests/blackbox/subscriptions.rs.
@schemathesis.hook("before_call").apply_to(name="PUT /v1/stream/__ds/subscriptions/{id}")
def subscription_webhook_on_loopback(context, case, kwargs):
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive:
        return
    # Positive by the document, not only by the generator (above).
    case.body = case.body
    if not case.meta.generation.mode.is_positive:
        return
    body = case.body
    if not isinstance(body, dict) or body.get("type") != "webhook":
        return
    webhook = body.get("webhook")
    if not isinstance(webhook, dict) or not isinstance(webhook.get("url"), str):
        return
    port = urlsplit(case.operation.schema.get_base_url()).port
    url = f"http://127.0.0.1:{port}/hook" if port else "http://127.0.0.1/hook"
    case.body = {**body, "webhook": {**webhook, "url": url}}


# `application/x-ndjson` (the thread export): the document gives the body as a string, one JSON
# object a line. schemathesis has no deserializer for the media type and reads a one-line body
# as JSON, then checks that object against `type: string`. This one checks what the format
# promises, every line a JSON object (a line that is not is reported), and hands schemathesis
# the body as the string the document describes.
@schemathesis.deserializer("application/x-ndjson")
def deserialize_ndjson(ctx, response):
    text = response.content.decode("utf-8")
    # Lines end at "\n" only: `str.splitlines` would also cut at U+0085 or U+2028, which JSON
    # strings may hold unescaped (seen: a `messageId` of "\u0000<U+0085>", seed 22).
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # after the last line's "\n", or an empty export
    for number, line in enumerate(lines, 1):
        if not isinstance(json.loads(line), dict):
            raise ValueError(f"line {number} of the NDJSON body is not a JSON object: {line[:200]}")
    return text


# Text bodies go on the wire as the bytes drawn. An attachment's body is its file's bytes
# (`format: binary`, `minLength: 1`: an empty upload is 422 `empty_attachment`), also for
# `text/plain`, `text/markdown` and `text/csv`; schemathesis 4.32.5 draws bytes for it, but its
# text serializer writes a drawn `Binary` as an empty body (seen: every `text/*` upload of seed
# 22 sent with `Content-Length: 0` and reported as a schema-valid upload refused). Its own
# binary serializer sends the bytes, and writes every other value as the text serializer does
# (a string as UTF-8, anything else as its JSON spelling).
schemathesis.serializer.alias(["text/plain", "text/markdown", "text/csv"], "application/octet-stream")
