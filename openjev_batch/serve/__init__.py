"""`openjev-batch serve`: the systemone HTTP API (`POST /v1/systemone`) over one engine and one readout held
open, answering one row per request with the columns and numbers `run` writes for that row.

    app.py      the ASGI app (Starlette on uvicorn, in a thread), the process's fate (drain, exit codes)
    service.py  the engine side: requests gathered into batches, prompted in one host thread, planned,
                prefilled and read out in the main thread through the job's own stage functions
                (pipeline/stages.py: `prompt_chunk`, `score_chunk`), never a copy
    request.py  a request body → the readout's row (the JSON rules of a JSONL line, the fields `run` reads)
    limits.py   the limits every request is held to before any model call, and the HTTP errors they give
"""
