"""RocketMQ's remoting protocol: frames, request/response codes, asyncio server and client."""
