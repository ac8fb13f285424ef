"""Keys for the providers' tests: a distinct one per provider, all set at once, so a test fails if one turns up where
it does not belong."""

KEYS = {"OPENAI_API_KEY": "sk-openai-0123456789", "ANTHROPIC_API_KEY": "sk-ant-0123456789",
        "GEMINI_API_KEY": "gemini-0123456789", "OPENROUTER_API_KEY": "sk-or-0123456789"}
