"""`openjev-batch serve`: the seed's systemone HTTP API (openjev-sglang's `POST /v1/systemone`) and the
product's own record route (`POST /v1/records`), over one engine and one readout held open.

    seed.py       the seed's protocol, the one place serve speaks it: its request/response models, a request
                  → the row body the readout reads, the records → the seed's answers, its usage and words
    routes.py     the endpoints (the seed's routes, /v1/records, /v1/manifest, /v1/status), the slots, timeouts
    app.py        the ASGI app (Starlette on uvicorn, in a thread), the process's fate (drain, exit codes)
    auth.py       the optional bearer key (`--api-key`, OPENJEV_API_KEY)
    image_urls.py `--allow-image-urls`: http(s) images fetched and inlined (opt-in: an SSRF hole otherwise)
    service.py    the engine side: requests gathered into batches, prompted in one host thread, planned,
                  prefilled and read out in the main thread through the job's own stage functions
                  (pipeline/stages.py: `prompt_chunk`, `score_chunk`), never a copy
    request.py    a body's bytes (413), and a body → the served readout's row through its `Request` reader
    response.py   the seed's and the product's response bodies, headers and errors
    limits.py     the limits every request is held to before any model call, and the HTTP errors they give

serve names no readout: it imports `readouts.base` alone (the readout's `Request` reads a body into its row, as
`parse_row` reads a file row) and takes what it holds from `Classifier.held()`.
"""
