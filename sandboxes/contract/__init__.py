"""What the service layer promises every interface: its errors (each message meant to be shown
as is), its result objects (the one description of each result) and the interface shapes
derived from them. Below the services, so interfaces, services and housekeeping share it."""
