//! Alarm states and composite alarm rules: the `AlarmRule` expression of an
//! `AWS::CloudWatch::CompositeAlarm`, parsed into a [`Rule`], bound to the alarms it names and
//! evaluated over their states.
//!
//! Syntax, from PutCompositeAlarm's `AlarmRule`
//! (<https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutCompositeAlarm.html>):
//! `ALARM("alarm-name or alarm-ARN")`, `OK(…)`, `INSUFFICIENT_DATA(…)` are true when the named
//! alarm is in that state; `TRUE` and `FALSE` are constants; `AND`, `OR`, `NOT` combine them and
//! parentheses group. "Alarm names specified in AlarmRule can be surrounded with double-quotes
//! ("), but do not have to be." A reference is an alarm's name or its ARN, matched by the ARN's
//! last `:`-separated part. Precedence is not documented; the conventional one is used:
//! `OR` < `AND` < `NOT`. Keywords are upper case, as every example on the page writes them.

use std::collections::BTreeSet;
use std::fmt;

use serde::Serialize;
use thiserror::Error;

/// An alarm's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum State {
    /// `OK`: within the threshold.
    #[serde(rename = "OK")]
    Ok,
    /// `ALARM`: outside the threshold.
    #[serde(rename = "ALARM")]
    Alarm,
    /// `INSUFFICIENT_DATA`: just created, or not enough data to decide.
    #[serde(rename = "INSUFFICIENT_DATA")]
    InsufficientData,
}

impl State {
    /// The state's name as CloudWatch writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "OK",
            Self::Alarm => "ALARM",
            Self::InsufficientData => "INSUFFICIENT_DATA",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A composite alarm's rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Rule {
    /// `TRUE`
    True,
    /// `FALSE`
    False,
    /// `ALARM(x)`, `OK(x)` or `INSUFFICIENT_DATA(x)`: true when alarm `x` is in `state`.
    Is {
        /// The state tested.
        state: State,
        /// The alarm referenced (its name once bound).
        alarm: String,
    },
    /// `NOT r`
    Not(Box<Rule>),
    /// `a AND b`
    And(Box<Rule>, Box<Rule>),
    /// `a OR b`
    Or(Box<Rule>, Box<Rule>),
}

/// Why a rule could not be parsed or bound.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RuleError {
    /// A character no token starts with.
    #[error("unexpected character {found:?} at {position}")]
    UnexpectedChar {
        /// Byte offset.
        position: usize,
        /// The character.
        found: char,
    },
    /// A token where another was expected.
    #[error("unexpected {found:?} at {position}, expected {expected}")]
    UnexpectedToken {
        /// Byte offset.
        position: usize,
        /// The token's text.
        found: String,
        /// What the grammar needed.
        expected: &'static str,
    },
    /// The text ended early.
    #[error("the rule ends early, expected {expected}")]
    UnexpectedEnd {
        /// What the grammar needed.
        expected: &'static str,
    },
    /// A word that is not a rule function or keyword.
    #[error("unknown rule function or keyword {0}")]
    UnknownFunction(String),
    /// `ALARM()` with nothing inside.
    #[error("an empty alarm name at {0}")]
    EmptyName(usize),
    /// The rule names an alarm that does not exist.
    #[error("the rule names alarm {0}, which does not exist")]
    UnknownAlarm(String),
}

impl Rule {
    /// Every alarm the rule references.
    pub fn alarms(&self) -> BTreeSet<&str> {
        let mut out = BTreeSet::new();
        self.collect(&mut out);
        out
    }

    fn collect<'a>(&'a self, out: &mut BTreeSet<&'a str>) {
        match self {
            Self::True | Self::False => {}
            Self::Is { alarm, .. } => {
                out.insert(alarm);
            }
            Self::Not(r) => r.collect(out),
            Self::And(a, b) | Self::Or(a, b) => {
                a.collect(out);
                b.collect(out);
            }
        }
    }

    /// Replaces every reference by the name `resolve` gives it; a reference that is an ARN is
    /// also tried by its last `:`-separated part. A reference nothing resolves is
    /// [`RuleError::UnknownAlarm`].
    pub fn bind(self, resolve: &dyn Fn(&str) -> Option<String>) -> Result<Self, RuleError> {
        Ok(match self {
            Self::True => Self::True,
            Self::False => Self::False,
            Self::Is { state, alarm } => {
                let by_arn = || alarm.strip_prefix("arn:").and_then(|_| alarm.rsplit(':').next()).and_then(resolve);
                match resolve(&alarm).or_else(by_arn) {
                    Some(name) => Self::Is { state, alarm: name },
                    None => return Err(RuleError::UnknownAlarm(alarm)),
                }
            }
            Self::Not(r) => Self::Not(Box::new(r.bind(resolve)?)),
            Self::And(a, b) => Self::And(Box::new(a.bind(resolve)?), Box::new(b.bind(resolve)?)),
            Self::Or(a, b) => Self::Or(Box::new(a.bind(resolve)?), Box::new(b.bind(resolve)?)),
        })
    }

    /// The rule's truth, given each referenced alarm's state.
    pub fn evaluate(&self, state_of: &dyn Fn(&str) -> State) -> bool {
        match self {
            Self::True => true,
            Self::False => false,
            Self::Is { state, alarm } => state_of(alarm) == *state,
            Self::Not(r) => !r.evaluate(state_of),
            Self::And(a, b) => a.evaluate(state_of) && b.evaluate(state_of),
            Self::Or(a, b) => a.evaluate(state_of) || b.evaluate(state_of),
        }
    }
}

impl fmt::Display for Rule {
    /// Names are written bare when they are plain words, quoted otherwise; a nested `AND`/`OR`
    /// is parenthesised.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let child = |f: &mut fmt::Formatter<'_>, r: &Rule| match r {
            Rule::And(..) | Rule::Or(..) => write!(f, "({r})"),
            _ => write!(f, "{r}"),
        };
        match self {
            Self::True => f.write_str("TRUE"),
            Self::False => f.write_str("FALSE"),
            Self::Is { state, alarm } => {
                if !alarm.is_empty() && alarm.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                    write!(f, "{state}({alarm})")
                } else {
                    write!(f, "{state}(\"{alarm}\")")
                }
            }
            Self::Not(r) => {
                f.write_str("NOT ")?;
                child(f, r)
            }
            Self::And(a, b) => {
                child(f, a)?;
                f.write_str(" AND ")?;
                child(f, b)
            }
            Self::Or(a, b) => {
                child(f, a)?;
                f.write_str(" OR ")?;
                child(f, b)
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word(String),
    Open,
    Close,
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn skip_ws(&mut self) {
        while let Some(c) = self.text[self.pos..].chars().next() {
            if !c.is_whitespace() {
                break;
            }
            self.pos += c.len_utf8();
        }
    }

    /// The next token and its offset, without consuming it.
    fn peek(&mut self) -> Result<Option<(usize, Tok, usize)>, RuleError> {
        self.skip_ws();
        let start = self.pos;
        let Some(c) = self.text[start..].chars().next() else {
            return Ok(None);
        };
        match c {
            '(' => Ok(Some((start, Tok::Open, start + 1))),
            ')' => Ok(Some((start, Tok::Close, start + 1))),
            c if c.is_ascii_alphabetic() || c == '_' => {
                let len = self.text[start..]
                    .find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_'))
                    .unwrap_or(self.text.len() - start);
                Ok(Some((start, Tok::Word(self.text[start..start + len].to_string()), start + len)))
            }
            found => Err(RuleError::UnexpectedChar { position: start, found }),
        }
    }

    fn peek_word(&mut self, word: &str) -> Result<bool, RuleError> {
        Ok(matches!(self.peek()?, Some((_, Tok::Word(w), _)) if w == word))
    }

    fn bump(&mut self) -> Result<Option<(usize, Tok)>, RuleError> {
        let next = self.peek()?;
        Ok(next.map(|(start, tok, end)| {
            self.pos = end;
            (start, tok)
        }))
    }

    fn or(&mut self) -> Result<Rule, RuleError> {
        let mut left = self.and()?;
        while self.peek_word("OR")? {
            self.bump()?;
            left = Rule::Or(Box::new(left), Box::new(self.and()?));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Rule, RuleError> {
        let mut left = self.not()?;
        while self.peek_word("AND")? {
            self.bump()?;
            left = Rule::And(Box::new(left), Box::new(self.not()?));
        }
        Ok(left)
    }

    fn not(&mut self) -> Result<Rule, RuleError> {
        if self.peek_word("NOT")? {
            self.bump()?;
            return Ok(Rule::Not(Box::new(self.not()?)));
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<Rule, RuleError> {
        const EXPECTED: &str = "ALARM(…), OK(…), INSUFFICIENT_DATA(…), TRUE, FALSE, NOT or (";
        let Some((position, tok)) = self.bump()? else {
            return Err(RuleError::UnexpectedEnd { expected: EXPECTED });
        };
        match tok {
            Tok::Open => {
                let inner = self.or()?;
                match self.bump()? {
                    Some((_, Tok::Close)) => Ok(inner),
                    Some((position, tok)) => {
                        Err(RuleError::UnexpectedToken { position, found: tok_text(&tok), expected: ")" })
                    }
                    None => Err(RuleError::UnexpectedEnd { expected: ")" }),
                }
            }
            Tok::Word(word) => {
                let state = match word.as_str() {
                    "TRUE" => return Ok(Rule::True),
                    "FALSE" => return Ok(Rule::False),
                    "ALARM" => State::Alarm,
                    "OK" => State::Ok,
                    "INSUFFICIENT_DATA" => State::InsufficientData,
                    _ => return Err(RuleError::UnknownFunction(word)),
                };
                match self.bump()? {
                    Some((_, Tok::Open)) => {}
                    Some((position, tok)) => {
                        return Err(RuleError::UnexpectedToken { position, found: tok_text(&tok), expected: "(" });
                    }
                    None => return Err(RuleError::UnexpectedEnd { expected: "(" }),
                }
                let alarm = self.name()?;
                Ok(Rule::Is { state, alarm })
            }
            Tok::Close => Err(RuleError::UnexpectedToken { position, found: ")".into(), expected: EXPECTED }),
        }
    }

    /// An alarm name or ARN up to and including the closing `)`: quoted (`"…"` or `'…'`) or
    /// bare (everything up to `)`, trimmed).
    fn name(&mut self) -> Result<String, RuleError> {
        self.skip_ws();
        let start = self.pos;
        let rest = &self.text[start..];
        let (name, after) = match rest.chars().next() {
            Some(q @ ('"' | '\'')) => {
                let close = rest[1..].find(q).ok_or(RuleError::UnexpectedEnd { expected: "a closing quote" })?;
                (rest[1..1 + close].to_string(), start + close + 2)
            }
            Some(_) => {
                let close = rest.find(')').ok_or(RuleError::UnexpectedEnd { expected: ")" })?;
                (rest[..close].trim().to_string(), start + close)
            }
            None => return Err(RuleError::UnexpectedEnd { expected: "an alarm name" }),
        };
        if name.is_empty() {
            return Err(RuleError::EmptyName(start));
        }
        self.pos = after;
        match self.bump()? {
            Some((_, Tok::Close)) => Ok(name),
            Some((position, tok)) => Err(RuleError::UnexpectedToken { position, found: tok_text(&tok), expected: ")" }),
            None => Err(RuleError::UnexpectedEnd { expected: ")" }),
        }
    }
}

fn tok_text(tok: &Tok) -> String {
    match tok {
        Tok::Word(w) => w.clone(),
        Tok::Open => "(".into(),
        Tok::Close => ")".into(),
    }
}

/// Parses an `AlarmRule`. References are kept as written; [`Rule::bind`] checks them.
pub fn parse(text: &str) -> Result<Rule, RuleError> {
    let mut parser = Parser { text, pos: 0 };
    let rule = parser.or()?;
    match parser.bump()? {
        None => Ok(rule),
        Some((position, tok)) => {
            Err(RuleError::UnexpectedToken { position, found: tok_text(&tok), expected: "AND, OR or the end" })
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn is(state: State, alarm: &str) -> Rule {
        Rule::Is { state, alarm: alarm.to_string() }
    }

    #[test]
    fn parses_every_form() {
        let cases = [
            (r#"ALARM("a")"#, is(State::Alarm, "a")),
            ("ALARM(a)", is(State::Alarm, "a")),
            (" OK( 'b c' ) ", is(State::Ok, "b c")),
            (
                "INSUFFICIENT_DATA(arn:aws:cloudwatch:us-east-1:123456789012:alarm:x)",
                is(State::InsufficientData, "arn:aws:cloudwatch:us-east-1:123456789012:alarm:x"),
            ),
            ("TRUE", Rule::True),
            ("FALSE", Rule::False),
            ("NOT ALARM(a)", Rule::Not(Box::new(is(State::Alarm, "a")))),
            (
                "ALARM(a) OR ALARM(b) AND OK(c)",
                Rule::Or(
                    Box::new(is(State::Alarm, "a")),
                    Box::new(Rule::And(Box::new(is(State::Alarm, "b")), Box::new(is(State::Ok, "c")))),
                ),
            ),
            (
                "(ALARM(a) OR ALARM(b)) AND NOT OK(c)",
                Rule::And(
                    Box::new(Rule::Or(Box::new(is(State::Alarm, "a")), Box::new(is(State::Alarm, "b")))),
                    Box::new(Rule::Not(Box::new(is(State::Ok, "c")))),
                ),
            ),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text).unwrap(), want, "{text}");
        }
    }

    /// The example of PutCompositeAlarm's `AlarmRule` and of the user guide's "Create a
    /// composite alarm": `(ALARM("CPUUtilizationTooHigh") OR ALARM("DiskReadOpsTooHigh")) AND
    /// OK("NetworkOutTooHigh")`.
    #[test]
    fn the_documented_example_evaluates_as_described() {
        let rule = parse(
            "(ALARM(\"CPUUtilizationTooHigh\") OR \nALARM(\"DiskReadOpsTooHigh\")) AND \nOK(\"NetworkOutTooHigh\")",
        )
        .unwrap();
        assert_eq!(
            rule.to_string(),
            "(ALARM(CPUUtilizationTooHigh) OR ALARM(DiskReadOpsTooHigh)) AND OK(NetworkOutTooHigh)"
        );
        let states = |cpu, disk, net| {
            move |name: &str| match name {
                "CPUUtilizationTooHigh" => cpu,
                "DiskReadOpsTooHigh" => disk,
                _ => net,
            }
        };
        use State::*;
        let cases = [
            (Alarm, Ok, Ok, true),
            (Ok, Alarm, Ok, true),
            (Alarm, Alarm, Alarm, false),
            (Ok, Ok, Ok, false),
            (Alarm, Ok, InsufficientData, false),
            (InsufficientData, InsufficientData, Ok, false),
        ];
        for (cpu, disk, net, want) in cases {
            assert_eq!(rule.evaluate(&states(cpu, disk, net)), want, "{cpu} {disk} {net}");
        }
    }

    #[test]
    fn binds_by_name_or_arn_and_names_the_unknown() {
        let known = |name: &str| ["a", "b"].contains(&name).then(|| name.to_string());
        let bound = parse("ALARM(\"arn:aws:cloudwatch:us-east-1:123456789012:alarm:a\") AND OK(b)")
            .unwrap()
            .bind(&known)
            .unwrap();
        assert_eq!(bound.alarms().into_iter().collect::<Vec<_>>(), vec!["a", "b"]);
        assert_eq!(parse("ALARM(a) OR ALARM(nope)").unwrap().bind(&known), Err(RuleError::UnknownAlarm("nope".into())));
    }

    #[test]
    fn errors() {
        assert_eq!(parse("ALARMS(a)"), Err(RuleError::UnknownFunction("ALARMS".into())));
        assert_eq!(parse("ALARM()"), Err(RuleError::EmptyName(6)));
        assert!(matches!(parse("ALARM(a) AND"), Err(RuleError::UnexpectedEnd { .. })));
        assert!(matches!(parse("ALARM(a) ALARM(b)"), Err(RuleError::UnexpectedToken { .. })));
        assert!(matches!(parse("(ALARM(a)"), Err(RuleError::UnexpectedEnd { .. })));
        assert!(matches!(parse("ALARM(a) & OK(b)"), Err(RuleError::UnexpectedChar { found: '&', .. })));
        assert!(matches!(parse("ALARM(\"a)"), Err(RuleError::UnexpectedEnd { .. })));
    }
}
