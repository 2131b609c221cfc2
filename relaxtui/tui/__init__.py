"""The Textual chat app: every token coloured by how it was produced, live statistics, a token inspector."""
