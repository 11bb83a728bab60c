"""Prometheus metrics of the services.

Each service keeps its series in a ``CollectorRegistry`` of its own (not
prometheus_client's global one), so that services sharing a process (the
single-machine mode, tests) never mix their series, and serves it from
``endpoint.py`` while ``[metrics] enabled`` is set.

- ``conductor.py``: what a conductor counts as it works (reports, binds,
  recovery, Placement calls);
- ``agent.py``: what an agent knows of its devices at each scrape (health
  of every device, and through ``gpu.py`` the GPU series named as
  NVIDIA's dcgm-exporter names them).

Nothing here imports the services: they hand their objects in.
"""
