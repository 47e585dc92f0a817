"""The preview proxy: HTTP and websockets from a browser to a port inside a sandbox.

An interface like the pages and the API (it calls sandboxes.services; fairshare.py alone
reads a sandbox's team, until the services' PreviewGrant names it): the ASGI app
(platform_site/asgi.py) hands it every request addressed to a preview — by host name
`PORT-SANDBOX.<SANDHUB_PREVIEW_DOMAIN>` or by path `/preview/SANDBOX/PORT/` — and it
authorizes the request through the services, opens the backend's port stream (over the
sandbox agent or an SSH channel, so a sandbox without network serves too) and speaks
HTTP/1.1 or websocket to the app over it, streaming both ways.

- routing: which preview a request addresses;
- origins: whether the request may come from where it comes from (Fetch Metadata);
- fairshare: each sandbox's and team's share of the proxy's connections;
- credentials: the session user and the preview token;
- cookies: which cookies the app sees, and what its Set-Cookie may set;
- ports: the blocking port stream driven from the event loop through a thread pool;
- forward: one HTTP exchange (h11 on the app's side);
- answers, redirects: the app's response headers as the browser gets them, and the page
  said instead of a redirect out of the preview;
- wsbridge: one websocket, bridged frame by frame (websockets' sans-I/O client);
- replies, failures: what the proxy answers itself, and the app's failures;
- sites: the start-up warning when previews share the platform's site;
- app: the ASGI entry that ties them together.
"""
