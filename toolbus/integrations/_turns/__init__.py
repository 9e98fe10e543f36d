"""What the durable engines' integrations share (`toolbus.integrations.dbos`,
`toolbus.integrations.restate`): the records a call leaves in the engine
(`records`), the agent loop's model and approver records (`replies`), how a
call is handed to the executor with its result decided or waiting at its
gate (`submission`), and the in-doubt rule applied (`doubt`).
"""
