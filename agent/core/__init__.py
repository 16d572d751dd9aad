"""What every layer of the agent shares: the error tree, the ports the agent needs from
the world (`Task`, `History`, `Publisher`, …), the records of delegation, and the fields
every log line carries. Imports nothing else of the agent."""
