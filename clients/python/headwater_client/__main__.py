"""`python -m headwater_client ...` is the `headwater` command."""

from headwater_client.cli import main

if __name__ == "__main__":
    main()
