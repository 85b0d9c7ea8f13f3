//! Conversation rules more than one vendor shares: each vendor says which apply to it
//! (`WireFormat::conversation_problems`).

use conform_config::conversation::{Message, Problem, Role};

/// The rules of a vendor that keeps the system prompt apart from the conversation
/// (Anthropic, Gemini): no system message after the first turn, and the conversation
/// begins with the user.
pub(crate) fn system_kept_apart(messages: &[Message], vendor: &str) -> Vec<Problem> {
    let mut found = Vec::new();
    let leading = messages
        .iter()
        .take_while(|m| m.role == Role::System)
        .count();
    for (i, m) in messages.iter().enumerate().skip(leading) {
        if m.role == Role::System {
            found.push(Problem::new(
                format!("/messages/{i}"),
                format!(
                    "{vendor} takes the system prompt apart from the conversation: a system message after the first turn cannot be sent"
                ),
            ));
        }
    }
    if let Some((i, first)) = messages.iter().enumerate().nth(leading)
        && first.role != Role::User
    {
        found.push(Problem::new(
            format!("/messages/{i}"),
            format!(
                "{vendor} needs the conversation to begin with a user message, not {}",
                first.role.as_str()
            ),
        ));
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pointers(found: &[Problem]) -> Vec<&str> {
        found.iter().map(|p| p.pointer.as_str()).collect()
    }

    #[test]
    fn a_system_prompt_kept_apart_is_refused_mid_conversation() {
        let m: Vec<Message> = serde_json::from_value(json!([{"role": "system", "content": "s"},
            {"role": "assistant", "content": "hello"},
            {"role": "system", "content": "late"},
            {"role": "user", "content": "hi"}]))
        .unwrap();
        let found = system_kept_apart(&m, "Gemini");
        assert_eq!(pointers(&found), ["/messages/2", "/messages/1"]);
        assert!(
            found[0]
                .message
                .starts_with("Gemini takes the system prompt apart")
        );
    }
}
