"""The browser's terminal: a websocket at /ws/sandboxes/SANDBOX/terminals/TERMINAL/ carrying a
terminal's output to xterm.js (binary frames) and its keystrokes and window size back
(app.py), for the signed-in user of the page, from the platform's own origin only
(identity.py). An interface: it calls sandboxes.services only."""
