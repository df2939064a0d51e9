"""`sparkindex serve`: the progress server (REST, WebSocket, Prometheus metrics, the web page).

It reads only the coordination store, so it shows every job, whichever driver on whichever
machine runs it, and it starts jobs as subprocesses of the CLI, so a job that crashes can never
take the server down (nor the server's end a job).
"""
