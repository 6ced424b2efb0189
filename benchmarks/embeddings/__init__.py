"""``make bench``'s embeddings table: one answer in six wire formats, per operation.

``formats`` owns what is measured (each format's encode, decode, read-one and
relay, the edge's renderer and its ``binascii`` floor); ``run`` owns the run
(the sizes, a fresh subprocess per format, ``benchmarks.micro``'s
``measure`` for every row); ``report`` writes the table, the plot and the
targets. ``python -m benchmarks.embeddings`` runs it (``run.main``).
"""
