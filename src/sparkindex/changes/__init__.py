"""Change capture: from committed row changes to rebuilt documents, in order, resumably.

A change source (one per dialect, :mod:`sparkindex.sources`) yields :class:`~.model.Change`
rows with a monotone position; :mod:`.fanout` maps each to the root keys of the documents it
touches; :mod:`.apply` rebuilds those documents by key and writes them with the position as
their external version; :mod:`sparkindex.coordination.offsets` keeps what each consumer group
has acknowledged.
"""
