"""A Python upstream for the load harness, on the server stack vLLM's OpenAI server runs on
(uvicorn with uvloop and httptools), as a bare ASGI app.

It answers with the exact bytes the in-repo mock gave for the same round, which the harness
captured and wrote to two files: the non-streamed JSON completion, and the streamed answer
(server-sent events, sent one event per write, as a streaming server yields them). It parses
every request body as JSON, as a real server must, and answers 400 to one that is not.

    python pymock.py PORT NONSTREAM-FILE STREAM-FILE
"""

import json
import sys

import uvicorn


def main():
    port, nonstream_path, stream_path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    with open(nonstream_path, "rb") as f:
        whole = f.read()
    with open(stream_path, "rb") as f:
        raw = f.read()
    events = [e + b"\n\n" for e in raw.split(b"\n\n") if e.strip()]
    json_headers = [(b"content-type", b"application/json")]
    sse_headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        try:
            request = json.loads(body)
        except ValueError:
            await send({"type": "http.response.start", "status": 400, "headers": json_headers})
            await send({"type": "http.response.body", "body": b'{"error": "not JSON"}'})
            return
        if not request.get("stream"):
            await send({"type": "http.response.start", "status": 200, "headers": json_headers})
            await send({"type": "http.response.body", "body": whole})
            return
        await send({"type": "http.response.start", "status": 200, "headers": sse_headers})
        for event in events:
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        access_log=False,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
