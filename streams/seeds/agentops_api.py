"""The agentops-memory service's HTTP contract, beside /v1, on our model (docs/agentops.md).

    POST   /sessions                  {id, project}                 201 the session
    POST   /sessions/{id}/end         {messages: [{role, content}]} {session_id, summary, message_count}
    GET    /sessions/recent           ?project=&limit=5
    POST   /observations              {session_id, type, title, content, project, tags, scope,
                                       topic_key}                   201 {id, action, revision_count,
                                                                         duplicate_count}
    GET    /observations/recent       ?project=&type=&scope=&limit=20
    GET    /observations/{id}
    PATCH  /observations/{id}         {type?, title?, content?, tags?}
    DELETE /observations/{id}         ?hard=true erases             204
    GET    /search                    ?q=&project=&type=&scope=&limit=10
    GET    /context                   ?project=&query=&scope=&limit=5
    GET    /timeline                  ?observation_id=&before=3&after=3
    GET    /stats                     ?project=
    GET    /export                    ?project=
    POST   /import                    {sessions, observations}
    GET    /health

Our tokens and tenancy: every call but /health needs a token with `read` or `write` like /v1,
and works in the token's tenant, where `project` is a namespace (sections/adapters/agentops.py). Each
write is one of our commands and each read of contents leaves `items.read` records, so the log
holds every call that changed or showed memory. Refusals use the service's body,
`{"error": "message"}`, with our statuses (400 for its validation failures, naming each field).
"""

from __future__ import annotations

from streams.seeds.agentops_data import AgentOpsData
from streams.seeds.agentops_observations import AgentOpsObservations
from streams.seeds.agentops_resource import Handler, wrap
from streams.seeds.agentops_search import AgentOpsSearch
from streams.seeds.agentops_sessions import AgentOpsSessions
from streams.server.service import Service
from streams.web.routing import RawRoute


def routes(service: Service) -> list[RawRoute]:
    """The leader routes (store mode forwards them to the partition's leader)."""
    sessions, observations = AgentOpsSessions(service), AgentOpsObservations(service)
    search, data = AgentOpsSearch(service), AgentOpsData(service)
    table: list[tuple[str, dict[str, Handler]]] = [
        ("/sessions", {"POST": sessions.create_session}),
        ("/sessions/recent", {"GET": sessions.recent_sessions}),
        ("/sessions/{id}/end", {"POST": sessions.end_session}),
        ("/observations", {"POST": observations.add_observation}),
        # Before /observations/{id}, which takes the other methods on /observations/recent
        # (a 400: not an id)
        ("/observations/recent", {"GET": observations.recent_observations}),
        (
            "/observations/{id}",
            {
                "GET": observations.get_observation,
                "PATCH": observations.update_observation,
                "DELETE": observations.delete_observation,
            },
        ),  # fmt: skip
        ("/search", {"GET": search.search}),
        ("/context", {"GET": search.context}),
        ("/timeline", {"GET": search.timeline}),
        ("/stats", {"GET": data.stats}),
        ("/export", {"GET": data.export}),
        ("/import", {"POST": data.import_}),
    ]
    return [RawRoute(p, {m: wrap(h) for m, h in endpoints.items()}) for p, endpoints in table]


def health_routes(service: Service) -> list[RawRoute]:
    """`GET /health`: liveness in the service's shape, no token needed (as /healthz)."""
    return [RawRoute("/health", {"GET": wrap(AgentOpsData(service).health)})]


__all__ = ["health_routes", "routes"]
