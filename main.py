"""Train / evaluate DLRM or DCNv2: `python main.py --help`. With no flags, the embedded demo.

Thin on purpose: flags become a `Config` in `dlrm.cli`, the work happens in `dlrm.train.trainer.run`.
Exit status: 0 on success, 1 on a user error (bad data, diverged training, unusable checkpoint), 128 + the
signal number when stopped by SIGTERM, SIGUSR1 or SIGINT (after writing a checkpoint).
"""
import sys


def main(argv=None) -> int:
    from dlrm.cli import parse_config

    config = parse_config(sys.argv[1:] if argv is None else argv)
    from dlrm.errors import PeerRankFailed, UserError
    from dlrm.train import trainer

    try:
        trainer.run(config)
    except UserError as error:
        if not isinstance(error, PeerRankFailed):  # the failing rank prints the message
            print(f"error: {error}", file=sys.stderr, flush=True)
        return getattr(error, "exit_code", 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
