"""Google's Gemini API (``generateContent``, ``streamGenerateContent``,
``countTokens``, ``embedContent``, ``batchEmbedContents``): the request
(``request``, its contents ``content``), the answer and the stream's chunks
(``answer``), embeddings (``embed``) and the error body (``answer.ErrorBody``),
as Google's REST reference and the google-genai SDK's types draw them."""
