"""The HUD relay: the CRCR protocol, crcr's outbox of callbacks, the bridge and the simulator."""
