"""Wire protocol: the Responses API's request, items, response object and events."""
