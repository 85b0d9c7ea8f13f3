//! OpenAI encodings (`o200k_base`, `cl100k_base`), counting chat messages the way
//! OpenAI bills Chat Completions: 3 tokens per message, 1 more with a `name`, the role
//! and every field's text encoded, and 3 for the reply priming (the OpenAI cookbook's
//! `num_tokens_from_messages`: 124 tokens for its example on gpt-4o, 129 on gpt-4).
//!
//! Text is encoded as ordinary text: the API bills `<|endoftext|>` written in a message
//! as the characters it is made of. Whether such text is dangerous is the tokens check's
//! business, through [`Tokenizer::control_tokens`].

use std::sync::{Arc, OnceLock};

use tiktoken_rs::CoreBPE;

use super::{Message, TokenizeError, Tokenizer};

const TOKENS_PER_MESSAGE: u64 = 3;
const TOKENS_PER_NAME: u64 = 1;
const REPLY_PRIMING: u64 = 3;

/// The control tokens of OpenAI's chat format (ChatML). The chat models of both
/// encodings frame every message with them, although the public encoding files list
/// only the encodings' own special tokens.
const CHAT_CONTROL: [&str; 3] = ["<|im_start|>", "<|im_end|>", "<|im_sep|>"];

/// One OpenAI encoding.
pub struct Tiktoken {
    bpe: &'static CoreBPE,
    describe: String,
    control: Vec<String>,
}

impl Tiktoken {
    /// The encoding's tokenizer, built once per process (building a BPE takes about
    /// 170 ms) and shared. `None` for an unknown encoding.
    pub fn shared(encoding: &str) -> Option<Arc<Tiktoken>> {
        static O200K: OnceLock<Arc<Tiktoken>> = OnceLock::new();
        static CL100K: OnceLock<Arc<Tiktoken>> = OnceLock::new();
        let (cell, bpe): (_, fn() -> &'static CoreBPE) = match encoding {
            "o200k_base" => (&O200K, tiktoken_rs::o200k_base_singleton),
            "cl100k_base" => (&CL100K, tiktoken_rs::cl100k_base_singleton),
            _ => return None,
        };
        Some(Arc::clone(cell.get_or_init(|| {
            let bpe = bpe();
            let mut control: Vec<String> = bpe
                .special_tokens()
                .into_iter()
                .map(str::to_string)
                .chain(CHAT_CONTROL.iter().map(|t| t.to_string()))
                .collect();
            control.sort();
            control.dedup();
            Arc::new(Tiktoken {
                bpe,
                describe: format!("tiktoken {encoding}"),
                control,
            })
        })))
    }

    /// Tokens of one text, encoded as ordinary text.
    pub fn count_text(&self, text: &str) -> u64 {
        self.bpe.encode_ordinary(text).len() as u64
    }

    /// Token ids of one text, for tests against published ids.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.bpe.encode_ordinary(text)
    }
}

impl Tokenizer for Tiktoken {
    fn describe(&self) -> &str {
        &self.describe
    }

    fn count_messages(&self, messages: &[Message<'_>]) -> Result<u64, TokenizeError> {
        let mut total = REPLY_PRIMING;
        for m in messages {
            total += TOKENS_PER_MESSAGE + self.count_text(m.role) + self.count_text(m.content);
            if let Some(name) = m.name {
                total += TOKENS_PER_NAME + self.count_text(name);
            }
        }
        Ok(total)
    }

    fn control_tokens(&self) -> &[String] {
        &self.control
    }
}
