"""Drives toolpilot's /v1/responses with the official `openai` Python SDK's Responses client.

Usage: python sdk_responses.py BASE_URL
Prints one JSON object describing what the SDK saw; the Rust test checks it. The mock upstream
behind toolpilot is scripted by the test in the same order as the calls below.
"""

import json
import sys

import openai
from openai import OpenAI


def main() -> None:
    client = OpenAI(base_url=sys.argv[1], api_key="not-needed", max_retries=0)
    out = {"sdk_version": openai.__version__}
    question = "What does a.txt say?"

    # 1. Non-streamed, with a server-side tool round behind it.
    r = client.responses.create(model="mock-model", instructions="Answer briefly.", input=question)
    out["nonstream"] = {
        "id": r.id,
        "object": r.object,
        "status": r.status,
        "output_text": r.output_text,
        "output_types": [item.type for item in r.output],
        "input_tokens": r.usage.input_tokens,
        "output_tokens": r.usage.output_tokens,
        "total_tokens": r.usage.total_tokens,
        "cached_tokens": r.usage.input_tokens_details.cached_tokens,
        "instructions": r.instructions,
    }

    # 2. create(stream=True): the raw events, in order.
    types, seqs, text, final = [], [], "", None
    for event in client.responses.create(model="mock-model", input=question, stream=True):
        types.append(event.type)
        seqs.append(event.sequence_number)
        if event.type == "response.output_text.delta":
            text += event.delta
        elif event.type == "response.completed":
            final = event.response
    out["stream"] = {
        "types": types,
        "text": text,
        "final_text": final.output_text if final else None,
        "total_tokens": final.usage.total_tokens if final else None,
        "sequence_numbers": seqs,
    }

    # 3. The responses.stream() helper, which accumulates and checks the stream's state.
    snapshots = []
    with client.responses.stream(model="mock-model", input=question) as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                snapshots.append(event.snapshot)
        final = stream.get_final_response()
    out["helper"] = {
        "output_text": final.output_text,
        "status": final.status,
        "last_snapshot": snapshots[-1] if snapshots else None,
        "snapshots": len(snapshots),
    }

    # 4. A client function tool: the call comes back; its output continues the conversation
    #    through previous_response_id.
    tools = [{
        "type": "function",
        "name": "deploy",
        "description": "deploy the app",
        "parameters": {"type": "object", "properties": {"env": {"type": "string"}},
                       "required": ["env"]},
    }]
    r = client.responses.create(model="mock-model", input="Deploy it.", tools=tools)
    calls = [item for item in r.output if item.type == "function_call"]
    call = calls[0]
    args = json.loads(call.arguments)
    follow = client.responses.create(
        model="mock-model",
        previous_response_id=r.id,
        input=[{"type": "function_call_output", "call_id": call.call_id,
                "output": f"deployed to {args['env']}"}],
        tools=tools,
    )
    out["function_call"] = {
        "text_before": r.output_text,
        "name": call.name,
        "call_id": call.call_id,
        "arguments": args,
        "status": call.status,
        "follow_text": follow.output_text,
        "follow_previous": follow.previous_response_id == r.id,
    }

    # 5. The same through the streaming helper: the call is in the final response.
    with client.responses.stream(model="mock-model", input="Deploy again.", tools=tools) as stream:
        arg_snapshots = [e.snapshot for e in stream if e.type == "response.function_call_arguments.delta"]
        final = stream.get_final_response()
    fc = [item for item in final.output if item.type == "function_call"][0]
    out["stream_function_call"] = {"name": fc.name, "arguments": json.loads(fc.arguments),
                                   "arg_snapshots": arg_snapshots}

    # 6. A validation error becomes the SDK's typed exception.
    try:
        client.responses.create(model="mock-model", input=[{"type": "mystery"}])
        out["bad_request"] = None
    except openai.BadRequestError as e:
        out["bad_request"] = {"status": e.status_code, "message": e.message,
                              "param": (e.body or {}).get("param")}

    # 7. An upstream failure in the middle of a stream: a response.failed event.
    failed = None
    for event in client.responses.create(model="mock-model", input=question, stream=True):
        if event.type == "response.failed":
            failed = {"status": event.response.status, "message": event.response.error.message}
    out["stream_failed"] = failed

    print(json.dumps(out))


if __name__ == "__main__":
    main()
