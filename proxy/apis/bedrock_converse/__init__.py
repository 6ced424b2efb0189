"""Bedrock's Converse API: the request (``request``, its content blocks
``blocks``), the whole answer and the stream's events (``answer``), as the
service model of ``bedrock-runtime`` draws them."""
