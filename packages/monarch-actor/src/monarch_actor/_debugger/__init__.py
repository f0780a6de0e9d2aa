"""``breakpoint()`` inside actors, served to ``monarch debug``: the debug
controller (an actor in the controller's process), its TCP server, the pdb
that runs inside an actor, the wire protocol both ends speak and the command
language. It is built on the user API (the controller is an actor)."""
