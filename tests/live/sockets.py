"""channels' test socket, patient: its 1 s default wait for a message is a hiccup on a loaded CI machine."""

from channels.testing import WebsocketCommunicator

# How long a test waits for what the server will send; a test that expects silence passes its own.
PATIENCE = 10.0


class Communicator(WebsocketCommunicator):
    async def connect(self, timeout=PATIENCE):
        return await super().connect(timeout)

    async def receive_output(self, timeout=PATIENCE):
        return await super().receive_output(timeout)

    async def receive_from(self, timeout=PATIENCE):
        return await super().receive_from(timeout)

    async def receive_json_from(self, timeout=PATIENCE):
        return await super().receive_json_from(timeout)

    async def disconnect(self, code=1000, timeout=PATIENCE):
        return await super().disconnect(code, timeout)
