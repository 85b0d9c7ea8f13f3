//! `conform keys new`: a signing key pair for the CI that makes evidence.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use conform_allowlist::sign::SigningKey;

use super::Exit;

#[derive(Debug, Args)]
pub struct KeysArgs {
    #[command(subcommand)]
    pub command: KeysCommand,
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Write a new Ed25519 key pair: DIR/NAME.key (private, mode 0600) and DIR/NAME.pub.
    #[command(after_help = "Then:\n  \
1. store DIR/NAME.key as the CI's secret CONFORM_SIGNING_KEY (the key's text, or the file's path);\n  \
2. list DIR/NAME.pub in the project's trust.toml:\n       \
[[keys]]\n       name = \"ci\"\n       public_key = \"conform-ed25519:…\"\n\n\
Every run and merge then signs the entries it grants, and every reader (gate, export, \
explain, serve) denies an entry the listed keys did not sign. Neither file is replaced if it \
exists.")]
    New {
        /// The folder to write the key pair to.
        #[arg(long)]
        out: PathBuf,
        /// The files' name.
        #[arg(long, default_value = "conform")]
        name: String,
    },
}

pub fn keys(args: KeysArgs) -> anyhow::Result<Exit> {
    match args.command {
        KeysCommand::New { out, name } => {
            print!("{}", SigningKey::new_pair(&out, &name)?);
            Ok(Exit::Ok)
        }
    }
}
