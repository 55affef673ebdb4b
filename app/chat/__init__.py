"""One turn, from the user's message to the saved reply, for every front end (issue 33 item 2).

`turn.TurnDriver` owns it: the engine's messages (typed ChatMessage), documents through the one
planner (app/documents/turn.py `prepare`), the tool loop with its approval callback, streaming,
stop, and the order of writes to the store (`transcript.py`); front ends follow its typed events
(`events.py`). No Qt: the window turns the events into signals.
"""
