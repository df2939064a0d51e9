"""A seeded fault campaign over real processes: ``python -m chaos``.

Each trial builds a hostile shop on a private PostgreSQL or MariaDB server, indexes it, then
rebuilds it while a writer commits changes and a live ``sync`` serves the aliases, and injects
faults at moments its seed chooses: SIGKILLs and SIGSTOPs of real processes, immediate server
restarts, network cuts, target errors, a dropped slot or purged binlogs, a full disk, a jumped
clock. Then it lets everything finish and checks the invariants (:mod:`chaos.invariants`).

The pieces, smallest first: :mod:`chaos.servers`, :mod:`chaos.netcut`, :mod:`chaos.clock`,
:mod:`chaos.disk` and :mod:`chaos.procs` are the fault tools; :mod:`chaos.workload` the schema
and the writer; :mod:`chaos.plan` what a seed decides; :mod:`chaos.faults` the fault kinds;
:mod:`chaos.trial` one trial from setup to verdict; :mod:`chaos.__main__` the campaign.
"""
