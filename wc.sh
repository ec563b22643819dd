the draft is not in the system prompt
wc = cat
