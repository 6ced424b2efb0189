"""``CompletionChunk``, the root a stream is made of: the chunk values and
the two stream framings (``frames``), the fast reader (``reader``), the writer
(``writer``) and the generated accessors' reference reader (``stock``). No
I/O."""
