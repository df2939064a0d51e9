"""``sparkindex serve``: the progress server (REST, WebSocket, Prometheus metrics, the web page).

It reads only the coordination store, so it shows every job, whichever driver on whichever machine runs it. It
starts jobs as subprocesses of the CLI, so a job that crashes can never take the server down (nor the server's end
a job), and Spark never starts inside it.

* ``app``: the Starlette application: routes, the token guard, the WebSocket hub and the verify schedule.
* ``state``: what every handler shares: the pipeline, the store (read views and writes), the token guard, the
  running commands and the progress samples.
* ``auth``: reads are open to loopback clients, changes need the bearer token. Host and Origin are checked, so a
  rebound DNS name or another site's page gets nothing.
* ``api``: the read-only REST endpoints (jobs, partitions, dead letters, sync consumers, actions). Plain functions,
  run in the thread pool, so a slow store never blocks the event loop.
* ``control``: the state-changing endpoints (reindex, stop, re-drive, verify/repair). Request values reach a command
  line only as ``--option=value``.
* ``actions``: long commands run as CLI subprocesses with their output in files. The server keeps the exit code and
  the JSON object of the last line.
* ``responses``: orjson responses, and request values checked with errors that name them.
* ``ws``: ``/ws``. One store reader every 2 s for all clients: live jobs, sync lag, last verifies, gaps, and the
  detail of a watched job.
* ``progress``: a job's progress with docs/s and ETA, from the server's own samples (the store holds counts only).
* ``metrics``: ``/metrics``, a Prometheus collector reading the store at scrape time; the sync families are
  shared with ``sync_endpoint``.
* ``sync_endpoint``: ``sync --metrics-port``: ``/metrics``, ``/healthz`` and ``/livez`` served from the sync's own
  process (a small WSGI server on a thread, closed with the sync).
* ``checks``: ``GET /api/check``, the preflight without its writing probes. The result is cached for a minute and
  shared by callers that arrive while it runs.
* ``sync_gaps``: ``GET /api/sync/gaps``: each gap a sync found (``si_sync_gap``), why, and how it ended, beside the
  group's error counters.
* ``verified``: ``GET /api/verify/aliases``: each alias's last verify and the drift it found, with sample ids.
* ``scheduled_verify``: ``verify: {every: ...}`` as ``serve`` runs it, in a subprocess. The "is it due" rule and
  the lock are :mod:`sparkindex.verify.run`'s.
* ``static/``: the self-contained page (HTML, CSS, JavaScript).

Its libraries are the ``server`` extra: importing any of its modules without them is one line naming
``pip install 'sparkindex[server]'``.
"""

from sparkindex.extras import require

# what this package's modules import; uvicorn (the server extra too) is imported by the command that serves
require("server", "the progress server (its page, API and Prometheus metrics)", ["starlette", "prometheus_client"])
