//! CloudWatch metric math: the expression language of a `Metrics` query's `Expression`,
//! parsed into an [`Expr`] and evaluated over time series that share one list of timestamps.
//!
//! Semantics follow the CloudWatch User Guide, "Using metric math"
//! (<https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/using-metric-math.html>;
//! source text: `awsdocs/amazon-cloudwatch-user-guide`, `doc_source/using-metric-math.md`):
//!
//! - **Arithmetic** (`+ - * / ^`, unary `-`): "Missing values in a time series are treated as
//!   0. If the value of a data point causes a function to attempt to divide by zero, the data
//!   point is dropped." Between two series a timestamp where only one has a value uses 0 for
//!   the other; where neither has one the result has none. Between a series and a scalar, the
//!   result has a value exactly where the series has one (a sparse series has no "missing value"
//!   to fill at a timestamp no operand has). Any non-finite result (x/0, 0/0, a complex power) is
//!   dropped the same way.
//! - **Comparison** (`< > <= >= == !=`) and **logical** operators (`AND`/`&&`, `OR`/`||`, and
//!   `NOT`/`!`): 1 for true, 0 for false; "when comparison operators are used between two time
//!   series, and only one of the time series has a value for a particular time stamp, the
//!   function treats the missing value in the other time series as 0"; any non-zero value is
//!   true.
//! - **`IF(condition, a[, b])`**: the page's rules and tables ("Using IF expressions"): a
//!   missing condition point drops the point; a true point whose `a` series has no value there
//!   gives **0**; a false point takes `b`'s value, or is dropped when `b` has none or is omitted;
//!   a scalar condition picks the whole of `a` or `b` (an empty series when `b` is omitted).
//! - **`FILL(x, v)`**: missing values of `x` replaced by the scalar `v`, by the value of the
//!   series `v` at that timestamp, by the most recent earlier value (`REPEAT`), or by linear
//!   interpolation between the values either side of the gap (`LINEAR`). A gap at the start
//!   (`REPEAT`, `LINEAR`) or at the end (`LINEAR`) has nothing to repeat or interpolate from and
//!   stays missing (the page does not say; this is the choice).
//! - **`DIFF(x)`**: "the difference between each value in the time series and the preceding value
//!   from that time series"; the preceding value is the previous point that *has* a value, and
//!   the first value has none (missing). **`RATE(x)`**: that difference divided by "the time
//!   difference in seconds between the two values".
//! - **`SUM`, `AVG`, `MIN`, `MAX`**: of a single series, a scalar over all its values (the whole
//!   range the alarm retrieves — the page warns these act differently when an alarm retrieves
//!   more datapoints than Evaluation Periods; see the evaluator); of an array `[a, b, …]`, a
//!   series across the array per timestamp. For `AVG` of an array "missing values are treated as
//!   0" (divided by the number of series); `SUM`, `MIN` and `MAX` use the values present. A
//!   timestamp where no series has a value has none. A scalar over no value at all is no value:
//!   the result is an empty series.
//! - **`ABS`, `CEIL`, `FLOOR`**: per value.
//!
//! Precedence (not documented; the conventional one): `OR`/`||` < `AND`/`&&` < `NOT`/`!` <
//! comparisons < `+ -` < `* /` < unary `-` < `^` (right-associative). Functions are upper case
//! and ids start with a lower-case letter, as the page requires. Every other function
//! (`METRICS`, `ANOMALY_DETECTION_BAND`, `SEARCH`, `PERIOD`, …) or construct (strings) is an
//! error naming it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;
use thiserror::Error;

/// A time series: one optional value per timestamp of the evaluation (`None` = missing).
pub type Series = Vec<Option<f64>>;

/// A binary operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum BinaryOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `^`
    Pow,
    /// `<`
    Lt,
    /// `>`
    Gt,
    /// `<=`
    Le,
    /// `>=`
    Ge,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `AND` / `&&`
    And,
    /// `OR` / `||`
    Or,
}

impl BinaryOp {
    fn symbol(self) -> &'static str {
        match self {
            Self::Add => "+",
            Self::Sub => "-",
            Self::Mul => "*",
            Self::Div => "/",
            Self::Pow => "^",
            Self::Lt => "<",
            Self::Gt => ">",
            Self::Le => "<=",
            Self::Ge => ">=",
            Self::Eq => "==",
            Self::Ne => "!=",
            Self::And => "AND",
            Self::Or => "OR",
        }
    }

    /// The operation on two present values; `None` when the result is dropped (non-finite).
    fn apply(self, a: f64, b: f64) -> Option<f64> {
        let truth = |t: bool| if t { 1.0 } else { 0.0 };
        let value = match self {
            Self::Add => a + b,
            Self::Sub => a - b,
            Self::Mul => a * b,
            Self::Div => a / b,
            Self::Pow => a.powf(b),
            Self::Lt => truth(a < b),
            Self::Gt => truth(a > b),
            Self::Le => truth(a <= b),
            Self::Ge => truth(a >= b),
            Self::Eq => truth(a == b),
            Self::Ne => truth(a != b),
            Self::And => truth(a != 0.0 && b != 0.0),
            Self::Or => truth(a != 0.0 || b != 0.0),
        };
        value.is_finite().then_some(value)
    }
}

/// A unary operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum UnaryOp {
    /// `-x`
    Neg,
    /// `NOT x` / `!x`
    Not,
}

/// A supported function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Function {
    /// `IF(condition, a[, b])`
    If,
    /// `FILL(x, value | series | REPEAT | LINEAR)`
    Fill,
    /// `DIFF(x)`
    Diff,
    /// `RATE(x)`
    Rate,
    /// `SUM(x)`
    Sum,
    /// `AVG(x)`
    Avg,
    /// `MIN(x)`
    Min,
    /// `MAX(x)`
    Max,
    /// `ABS(x)`
    Abs,
    /// `CEIL(x)`
    Ceil,
    /// `FLOOR(x)`
    Floor,
}

impl Function {
    fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "IF" => Self::If,
            "FILL" => Self::Fill,
            "DIFF" => Self::Diff,
            "RATE" => Self::Rate,
            "SUM" => Self::Sum,
            "AVG" => Self::Avg,
            "MIN" => Self::Min,
            "MAX" => Self::Max,
            "ABS" => Self::Abs,
            "CEIL" => Self::Ceil,
            "FLOOR" => Self::Floor,
            _ => return None,
        })
    }

    /// The function's name as written in an expression.
    pub fn name(self) -> &'static str {
        match self {
            Self::If => "IF",
            Self::Fill => "FILL",
            Self::Diff => "DIFF",
            Self::Rate => "RATE",
            Self::Sum => "SUM",
            Self::Avg => "AVG",
            Self::Min => "MIN",
            Self::Max => "MAX",
            Self::Abs => "ABS",
            Self::Ceil => "CEIL",
            Self::Floor => "FLOOR",
        }
    }

    fn arity(self) -> (usize, usize, &'static str) {
        match self {
            Self::If => (2, 3, "2 or 3"),
            Self::Fill => (2, 2, "2"),
            _ => (1, 1, "1"),
        }
    }
}

/// `FILL`'s non-numeric fill modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum FillMode {
    /// `REPEAT`: the most recent earlier value.
    Repeat,
    /// `LINEAR`: interpolated between the values either side of the gap.
    Linear,
}

/// A parsed metric math expression.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Expr {
    /// A number literal.
    Number(f64),
    /// The id of another query of the same alarm.
    Id(String),
    /// `REPEAT` or `LINEAR` (only as `FILL`'s second argument).
    Fill(FillMode),
    /// `[a, b, …]`: an array of time series.
    Array(Vec<Expr>),
    /// A unary operation.
    Unary {
        /// The operator.
        op: UnaryOp,
        /// The operand.
        operand: Box<Expr>,
    },
    /// A binary operation.
    Binary {
        /// The operator.
        op: BinaryOp,
        /// Left operand.
        left: Box<Expr>,
        /// Right operand.
        right: Box<Expr>,
    },
    /// A function call.
    Call {
        /// The function.
        function: Function,
        /// Its arguments.
        args: Vec<Expr>,
    },
}

impl Expr {
    /// Every query id the expression reads.
    pub fn ids(&self) -> BTreeSet<&str> {
        let mut ids = BTreeSet::new();
        self.collect_ids(&mut ids);
        ids
    }

    fn collect_ids<'a>(&'a self, ids: &mut BTreeSet<&'a str>) {
        match self {
            Self::Number(_) | Self::Fill(_) => {}
            Self::Id(id) => {
                ids.insert(id);
            }
            Self::Array(items) | Self::Call { args: items, .. } => items.iter().for_each(|e| e.collect_ids(ids)),
            Self::Unary { operand, .. } => operand.collect_ids(ids),
            Self::Binary { left, right, .. } => {
                left.collect_ids(ids);
                right.collect_ids(ids);
            }
        }
    }
}

impl fmt::Display for Expr {
    /// Fully parenthesised: every binary operation is wrapped, so the tree reads unambiguously.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |f: &mut fmt::Formatter<'_>, items: &[Expr]| -> fmt::Result {
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{item}")?;
            }
            Ok(())
        };
        match self {
            Self::Number(n) => write!(f, "{n}"),
            Self::Id(id) => f.write_str(id),
            Self::Fill(FillMode::Repeat) => f.write_str("REPEAT"),
            Self::Fill(FillMode::Linear) => f.write_str("LINEAR"),
            Self::Array(items) => {
                f.write_str("[")?;
                list(f, items)?;
                f.write_str("]")
            }
            Self::Unary { op: UnaryOp::Neg, operand } => write!(f, "-{operand}"),
            Self::Unary { op: UnaryOp::Not, operand } => write!(f, "NOT {operand}"),
            Self::Binary { op, left, right } => write!(f, "({left} {} {right})", op.symbol()),
            Self::Call { function, args } => {
                write!(f, "{}(", function.name())?;
                list(f, args)?;
                f.write_str(")")
            }
        }
    }
}

/// Why an expression could not be parsed or evaluated.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum MathError {
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
    #[error("the expression ends early, expected {expected}")]
    UnexpectedEnd {
        /// What the grammar needed.
        expected: &'static str,
    },
    /// A function this evaluator does not implement (`ANOMALY_DETECTION_BAND`, `METRICS`, …).
    #[error("unsupported metric math function {0}")]
    UnsupportedFunction(String),
    /// A construct this evaluator does not implement (string literals, bare upper-case words).
    #[error("unsupported metric math construct {0}")]
    UnsupportedConstruct(String),
    /// A function called with the wrong number of arguments.
    #[error("{function} takes {expected} argument(s), not {found}")]
    Arity {
        /// The function.
        function: &'static str,
        /// How many it takes.
        expected: &'static str,
        /// How many it was given.
        found: usize,
    },
    /// An id that names no query (or whose series was not provided).
    #[error("unknown id {0}")]
    UnknownId(String),
    /// An operand of the wrong kind (a scalar where a series is needed, two arrays…).
    #[error("{operation}: {reason}")]
    Type {
        /// The function or operator.
        operation: String,
        /// What was wrong.
        reason: &'static str,
    },
    /// The expression's result is not a single time series (CloudWatch requires one).
    #[error("the result is {0}, not a single time series")]
    NotATimeSeries(&'static str),
}

// ------------------------------------------------------------------------------------------
// Parsing
// ------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(f64),
    Id(String),
    Word(String),
    Sym(&'static str),
}

impl Tok {
    fn text(&self) -> String {
        match self {
            Self::Num(n) => n.to_string(),
            Self::Id(s) | Self::Word(s) => s.clone(),
            Self::Sym(s) => (*s).to_string(),
        }
    }
}

fn tokenize(text: &str) -> Result<Vec<(usize, Tok)>, MathError> {
    let bytes: Vec<(usize, char)> = text.char_indices().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(&(pos, c)) = bytes.get(i) {
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if c.is_ascii_digit() || (c == '.' && bytes.get(i + 1).is_some_and(|(_, d)| d.is_ascii_digit())) {
            let start = i;
            while bytes.get(i).is_some_and(|(_, d)| d.is_ascii_digit() || *d == '.') {
                i += 1;
            }
            if bytes.get(i).is_some_and(|(_, d)| *d == 'e' || *d == 'E') {
                let mut j = i + 1;
                if bytes.get(j).is_some_and(|(_, d)| *d == '+' || *d == '-') {
                    j += 1;
                }
                if bytes.get(j).is_some_and(|(_, d)| d.is_ascii_digit()) {
                    i = j;
                    while bytes.get(i).is_some_and(|(_, d)| d.is_ascii_digit()) {
                        i += 1;
                    }
                }
            }
            let literal: String = bytes[start..i].iter().map(|(_, d)| *d).collect();
            let value: f64 = literal.parse().map_err(|_| MathError::UnexpectedToken {
                position: pos,
                found: literal.clone(),
                expected: "a number",
            })?;
            out.push((pos, Tok::Num(value)));
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while bytes.get(i).is_some_and(|(_, d)| d.is_ascii_alphanumeric() || *d == '_') {
                i += 1;
            }
            let word: String = bytes[start..i].iter().map(|(_, d)| *d).collect();
            let tok = if c.is_ascii_lowercase() { Tok::Id(word) } else { Tok::Word(word) };
            out.push((pos, tok));
            continue;
        }
        if c == '"' || c == '\'' {
            return Err(MathError::UnsupportedConstruct(format!("string literal at {pos}")));
        }
        let next = bytes.get(i + 1).map(|(_, d)| *d);
        let (sym, len): (&'static str, usize) = match (c, next) {
            ('<', Some('=')) => ("<=", 2),
            ('>', Some('=')) => (">=", 2),
            ('=', Some('=')) => ("==", 2),
            ('!', Some('=')) => ("!=", 2),
            ('&', Some('&')) => ("&&", 2),
            ('|', Some('|')) => ("||", 2),
            ('<', _) => ("<", 1),
            ('>', _) => (">", 1),
            ('!', _) => ("!", 1),
            ('+', _) => ("+", 1),
            ('-', _) => ("-", 1),
            ('*', _) => ("*", 1),
            ('/', _) => ("/", 1),
            ('^', _) => ("^", 1),
            ('(', _) => ("(", 1),
            (')', _) => (")", 1),
            ('[', _) => ("[", 1),
            (']', _) => ("]", 1),
            (',', _) => (",", 1),
            _ => return Err(MathError::UnexpectedChar { position: pos, found: c }),
        };
        out.push((pos, Tok::Sym(sym)));
        i += len;
    }
    Ok(out)
}

struct Parser {
    tokens: Vec<(usize, Tok)>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.at).map(|(_, t)| t)
    }

    fn peek_is_sym(&self, sym: &str) -> bool {
        matches!(self.peek(), Some(Tok::Sym(s)) if *s == sym)
    }

    fn peek_is_word(&self, word: &str) -> bool {
        matches!(self.peek(), Some(Tok::Word(w)) if w == word)
    }

    fn next(&mut self) -> Option<(usize, Tok)> {
        let tok = self.tokens.get(self.at).cloned();
        self.at += 1;
        tok
    }

    fn expect_sym(&mut self, sym: &'static str, expected: &'static str) -> Result<(), MathError> {
        match self.next() {
            Some((_, Tok::Sym(s))) if s == sym => Ok(()),
            Some((position, tok)) => Err(MathError::UnexpectedToken { position, found: tok.text(), expected }),
            None => Err(MathError::UnexpectedEnd { expected }),
        }
    }

    fn expr(&mut self) -> Result<Expr, MathError> {
        let mut left = self.and()?;
        while self.peek_is_word("OR") || self.peek_is_sym("||") {
            self.at += 1;
            let right = self.and()?;
            left = Expr::Binary { op: BinaryOp::Or, left: Box::new(left), right: Box::new(right) };
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Expr, MathError> {
        let mut left = self.not()?;
        while self.peek_is_word("AND") || self.peek_is_sym("&&") {
            self.at += 1;
            let right = self.not()?;
            left = Expr::Binary { op: BinaryOp::And, left: Box::new(left), right: Box::new(right) };
        }
        Ok(left)
    }

    fn not(&mut self) -> Result<Expr, MathError> {
        if self.peek_is_word("NOT") || self.peek_is_sym("!") {
            self.at += 1;
            let operand = self.not()?;
            return Ok(Expr::Unary { op: UnaryOp::Not, operand: Box::new(operand) });
        }
        self.comparison()
    }

    fn comparison(&mut self) -> Result<Expr, MathError> {
        let mut left = self.additive()?;
        loop {
            let op = match self.peek() {
                Some(Tok::Sym("<")) => BinaryOp::Lt,
                Some(Tok::Sym(">")) => BinaryOp::Gt,
                Some(Tok::Sym("<=")) => BinaryOp::Le,
                Some(Tok::Sym(">=")) => BinaryOp::Ge,
                Some(Tok::Sym("==")) => BinaryOp::Eq,
                Some(Tok::Sym("!=")) => BinaryOp::Ne,
                _ => return Ok(left),
            };
            self.at += 1;
            let right = self.additive()?;
            left = Expr::Binary { op, left: Box::new(left), right: Box::new(right) };
        }
    }

    fn additive(&mut self) -> Result<Expr, MathError> {
        let mut left = self.multiplicative()?;
        loop {
            let op = match self.peek() {
                Some(Tok::Sym("+")) => BinaryOp::Add,
                Some(Tok::Sym("-")) => BinaryOp::Sub,
                _ => return Ok(left),
            };
            self.at += 1;
            let right = self.multiplicative()?;
            left = Expr::Binary { op, left: Box::new(left), right: Box::new(right) };
        }
    }

    fn multiplicative(&mut self) -> Result<Expr, MathError> {
        let mut left = self.unary()?;
        loop {
            let op = match self.peek() {
                Some(Tok::Sym("*")) => BinaryOp::Mul,
                Some(Tok::Sym("/")) => BinaryOp::Div,
                _ => return Ok(left),
            };
            self.at += 1;
            let right = self.unary()?;
            left = Expr::Binary { op, left: Box::new(left), right: Box::new(right) };
        }
    }

    fn unary(&mut self) -> Result<Expr, MathError> {
        if self.peek_is_sym("-") {
            self.at += 1;
            let operand = self.unary()?;
            return Ok(Expr::Unary { op: UnaryOp::Neg, operand: Box::new(operand) });
        }
        self.power()
    }

    fn power(&mut self) -> Result<Expr, MathError> {
        let base = self.primary()?;
        if self.peek_is_sym("^") {
            self.at += 1;
            let exponent = self.unary()?;
            return Ok(Expr::Binary { op: BinaryOp::Pow, left: Box::new(base), right: Box::new(exponent) });
        }
        Ok(base)
    }

    fn primary(&mut self) -> Result<Expr, MathError> {
        const OPERAND: &str = "a number, an id, a function, ( or [";
        let Some((position, tok)) = self.next() else {
            return Err(MathError::UnexpectedEnd { expected: OPERAND });
        };
        match tok {
            Tok::Num(n) => Ok(Expr::Number(n)),
            Tok::Id(id) => {
                if self.peek_is_sym("(") {
                    // Functions are upper case; `fill(…)` is not one.
                    return Err(MathError::UnsupportedFunction(id));
                }
                Ok(Expr::Id(id))
            }
            Tok::Sym("(") => {
                let inner = self.expr()?;
                self.expect_sym(")", ")")?;
                Ok(inner)
            }
            Tok::Sym("[") => {
                let items = self.list("]")?;
                Ok(Expr::Array(items))
            }
            Tok::Word(word) if self.peek_is_sym("(") => {
                let function = Function::from_name(&word).ok_or(MathError::UnsupportedFunction(word))?;
                self.at += 1;
                let args = self.list(")")?;
                let (min, max, expected) = function.arity();
                if args.len() < min || args.len() > max {
                    return Err(MathError::Arity { function: function.name(), expected, found: args.len() });
                }
                Ok(Expr::Call { function, args })
            }
            Tok::Word(word) => match word.as_str() {
                "REPEAT" => Ok(Expr::Fill(FillMode::Repeat)),
                "LINEAR" => Ok(Expr::Fill(FillMode::Linear)),
                _ => Err(MathError::UnsupportedConstruct(word)),
            },
            other => Err(MathError::UnexpectedToken { position, found: other.text(), expected: OPERAND }),
        }
    }

    /// Comma-separated expressions up to `close` (consumed).
    fn list(&mut self, close: &'static str) -> Result<Vec<Expr>, MathError> {
        let mut items = Vec::new();
        if self.peek_is_sym(close) {
            self.at += 1;
            return Ok(items);
        }
        loop {
            items.push(self.expr()?);
            match self.next() {
                Some((_, Tok::Sym(","))) => {}
                Some((_, Tok::Sym(s))) if s == close => return Ok(items),
                Some((position, tok)) => {
                    return Err(MathError::UnexpectedToken {
                        position,
                        found: tok.text(),
                        expected: ", or a closing bracket",
                    });
                }
                None => return Err(MathError::UnexpectedEnd { expected: close }),
            }
        }
    }
}

/// Parses a metric math expression.
pub fn parse(text: &str) -> Result<Expr, MathError> {
    let mut parser = Parser { tokens: tokenize(text)?, at: 0 };
    let expr = parser.expr()?;
    if let Some((position, tok)) = parser.next() {
        let found = tok.text();
        if let Tok::Word(word) = tok
            && word != "AND"
            && word != "OR"
            && word != "NOT"
        {
            return Err(MathError::UnsupportedConstruct(word));
        }
        return Err(MathError::UnexpectedToken { position, found, expected: "an operator or the end" });
    }
    check_fill_modes(&expr, false)?;
    Ok(expr)
}

/// `REPEAT` and `LINEAR` are only `FILL`'s second argument.
fn check_fill_modes(expr: &Expr, allowed: bool) -> Result<(), MathError> {
    match expr {
        Expr::Fill(_) if !allowed => {
            Err(MathError::UnsupportedConstruct(format!("{expr} outside FILL's second argument")))
        }
        Expr::Number(_) | Expr::Id(_) | Expr::Fill(_) => Ok(()),
        Expr::Array(items) => items.iter().try_for_each(|e| check_fill_modes(e, false)),
        Expr::Unary { operand, .. } => check_fill_modes(operand, false),
        Expr::Binary { left, right, .. } => {
            check_fill_modes(left, false)?;
            check_fill_modes(right, false)
        }
        Expr::Call { function, args } => {
            args.iter().enumerate().try_for_each(|(i, e)| check_fill_modes(e, *function == Function::Fill && i == 1))
        }
    }
}

// ------------------------------------------------------------------------------------------
// Evaluation
// ------------------------------------------------------------------------------------------

/// The value of an expression or sub-expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A single number.
    Scalar(f64),
    /// One time series.
    Series(Series),
    /// An array of time series.
    Array(Vec<Series>),
}

impl Value {
    fn kind(&self) -> &'static str {
        match self {
            Self::Scalar(_) => "a scalar",
            Self::Series(_) => "a time series",
            Self::Array(_) => "an array of time series",
        }
    }
}

struct Ctx<'a> {
    timestamps: &'a [i64],
    series: &'a BTreeMap<String, Series>,
}

impl Ctx<'_> {
    fn empty(&self) -> Series {
        vec![None; self.timestamps.len()]
    }

    fn scalar(&self, value: Option<f64>) -> Value {
        match value {
            Some(v) if v.is_finite() => Value::Scalar(v),
            _ => Value::Series(self.empty()),
        }
    }

    fn constant(&self, value: f64) -> Series {
        vec![Some(value); self.timestamps.len()]
    }
}

/// Evaluates `expr` over `timestamps` (ascending; one per datapoint), reading each id from
/// `series` (each as long as `timestamps`).
pub fn evaluate(expr: &Expr, timestamps: &[i64], series: &BTreeMap<String, Series>) -> Result<Value, MathError> {
    eval(expr, &Ctx { timestamps, series })
}

/// Evaluates `expr` and requires a single time series, as CloudWatch requires of every
/// expression's final result.
pub fn evaluate_series(
    expr: &Expr,
    timestamps: &[i64],
    series: &BTreeMap<String, Series>,
) -> Result<Series, MathError> {
    match evaluate(expr, timestamps, series)? {
        Value::Series(s) => Ok(s),
        other => Err(MathError::NotATimeSeries(other.kind())),
    }
}

fn eval(expr: &Expr, ctx: &Ctx<'_>) -> Result<Value, MathError> {
    match expr {
        Expr::Number(n) => Ok(Value::Scalar(*n)),
        Expr::Id(id) => {
            let series = ctx.series.get(id).ok_or_else(|| MathError::UnknownId(id.clone()))?;
            if series.len() != ctx.timestamps.len() {
                return Err(MathError::Type {
                    operation: id.clone(),
                    reason: "series length differs from the timestamps",
                });
            }
            Ok(Value::Series(series.clone()))
        }
        Expr::Fill(_) => Err(MathError::UnsupportedConstruct(format!("{expr} outside FILL's second argument"))),
        Expr::Array(items) => {
            let mut out = Vec::new();
            for item in items {
                match eval(item, ctx)? {
                    Value::Scalar(s) => out.push(ctx.constant(s)),
                    Value::Series(s) => out.push(s),
                    Value::Array(inner) => out.extend(inner),
                }
            }
            Ok(Value::Array(out))
        }
        Expr::Unary { op, operand } => {
            let f = |v: f64| match op {
                UnaryOp::Neg => Some(-v),
                UnaryOp::Not => Some(if v == 0.0 { 1.0 } else { 0.0 }),
            };
            Ok(map_value(eval(operand, ctx)?, ctx, f))
        }
        Expr::Binary { op, left, right } => binary(*op, eval(left, ctx)?, eval(right, ctx)?, ctx),
        Expr::Call { function, args } => call(*function, args, ctx),
    }
}

fn map_value(value: Value, ctx: &Ctx<'_>, f: impl Fn(f64) -> Option<f64>) -> Value {
    let map_series =
        |s: Series| -> Series { s.into_iter().map(|p| p.and_then(&f).filter(|v| v.is_finite())).collect() };
    match value {
        Value::Scalar(v) => ctx.scalar(f(v)),
        Value::Series(s) => Value::Series(map_series(s)),
        Value::Array(items) => Value::Array(items.into_iter().map(map_series).collect()),
    }
}

fn series_series(op: BinaryOp, a: &[Option<f64>], b: &[Option<f64>]) -> Series {
    a.iter()
        .zip(b)
        .map(|(x, y)| match (x, y) {
            (None, None) => None,
            // "Missing values in a time series are treated as 0."
            (x, y) => op.apply(x.unwrap_or(0.0), y.unwrap_or(0.0)),
        })
        .collect()
}

fn series_scalar(op: BinaryOp, a: &[Option<f64>], s: f64, scalar_left: bool) -> Series {
    a.iter().map(|x| x.and_then(|v| if scalar_left { op.apply(s, v) } else { op.apply(v, s) })).collect()
}

fn binary(op: BinaryOp, left: Value, right: Value, ctx: &Ctx<'_>) -> Result<Value, MathError> {
    Ok(match (left, right) {
        (Value::Scalar(a), Value::Scalar(b)) => ctx.scalar(op.apply(a, b)),
        (Value::Series(a), Value::Scalar(s)) => Value::Series(series_scalar(op, &a, s, false)),
        (Value::Scalar(s), Value::Series(b)) => Value::Series(series_scalar(op, &b, s, true)),
        (Value::Series(a), Value::Series(b)) => Value::Series(series_series(op, &a, &b)),
        (Value::Array(items), Value::Scalar(s)) => {
            Value::Array(items.iter().map(|a| series_scalar(op, a, s, false)).collect())
        }
        (Value::Scalar(s), Value::Array(items)) => {
            Value::Array(items.iter().map(|b| series_scalar(op, b, s, true)).collect())
        }
        (Value::Array(items), Value::Series(b)) => {
            Value::Array(items.iter().map(|a| series_series(op, a, &b)).collect())
        }
        (Value::Series(a), Value::Array(items)) => {
            Value::Array(items.iter().map(|b| series_series(op, &a, b)).collect())
        }
        (Value::Array(_), Value::Array(_)) => {
            return Err(MathError::Type { operation: op.symbol().to_string(), reason: "two arrays of time series" });
        }
    })
}

fn call(function: Function, args: &[Expr], ctx: &Ctx<'_>) -> Result<Value, MathError> {
    let arg = |i: usize| -> Result<Value, MathError> {
        args.get(i)
            .map(|e| eval(e, ctx))
            .unwrap_or_else(|| Err(MathError::Arity { function: function.name(), expected: "more", found: args.len() }))
    };
    let type_error = |reason| MathError::Type { operation: function.name().to_string(), reason };
    match function {
        Function::If => eval_if(arg(0)?, arg(1)?, if args.len() > 2 { Some(arg(2)?) } else { None }, ctx),
        Function::Fill => {
            let mode = match args.get(1) {
                Some(Expr::Fill(mode)) => Filler::Mode(*mode),
                _ => match arg(1)? {
                    Value::Scalar(s) => Filler::Scalar(s),
                    Value::Series(s) => Filler::Series(s),
                    Value::Array(_) => return Err(type_error("the filler is an array")),
                },
            };
            match arg(0)? {
                Value::Series(s) => Ok(Value::Series(fill(&s, &mode, ctx.timestamps))),
                Value::Array(items) => Ok(Value::Array(items.iter().map(|s| fill(s, &mode, ctx.timestamps)).collect())),
                Value::Scalar(_) => Err(type_error("needs a time series, not a scalar")),
            }
        }
        Function::Diff | Function::Rate => {
            let per_second = function == Function::Rate;
            match arg(0)? {
                Value::Series(s) => Ok(Value::Series(diff(&s, ctx.timestamps, per_second))),
                Value::Array(items) => {
                    Ok(Value::Array(items.iter().map(|s| diff(s, ctx.timestamps, per_second)).collect()))
                }
                Value::Scalar(_) => Err(type_error("needs a time series, not a scalar")),
            }
        }
        Function::Sum | Function::Avg | Function::Min | Function::Max => match arg(0)? {
            Value::Series(s) => {
                let present: Vec<f64> = s.iter().flatten().copied().collect();
                Ok(ctx.scalar(aggregate(function, &present, present.len())))
            }
            Value::Array(items) => {
                let out = (0..ctx.timestamps.len())
                    .map(|i| {
                        let present: Vec<f64> = items.iter().filter_map(|s| s.get(i).copied().flatten()).collect();
                        aggregate(function, &present, items.len())
                    })
                    .collect();
                Ok(Value::Series(out))
            }
            Value::Scalar(_) => Err(type_error("needs a time series or an array, not a scalar")),
        },
        Function::Abs => Ok(map_value(arg(0)?, ctx, |v| Some(v.abs()))),
        Function::Ceil => Ok(map_value(arg(0)?, ctx, |v| Some(v.ceil()))),
        Function::Floor => Ok(map_value(arg(0)?, ctx, |v| Some(v.floor()))),
    }
}

/// `SUM`/`AVG`/`MIN`/`MAX` of the values present; `AVG` divides by `count` (missing as 0).
fn aggregate(function: Function, present: &[f64], count: usize) -> Option<f64> {
    if present.is_empty() {
        return None;
    }
    let sum: f64 = present.iter().sum();
    let value = match function {
        Function::Sum => sum,
        Function::Avg => sum / count.max(1) as f64,
        Function::Min => present.iter().copied().fold(f64::INFINITY, f64::min),
        Function::Max => present.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        _ => return None,
    };
    value.is_finite().then_some(value)
}

fn eval_if(cond: Value, then: Value, otherwise: Option<Value>, ctx: &Ctx<'_>) -> Result<Value, MathError> {
    let type_error = |reason| MathError::Type { operation: "IF".to_string(), reason };
    if matches!(then, Value::Array(_)) || matches!(otherwise, Some(Value::Array(_))) {
        return Err(type_error("a branch is an array of time series"));
    }
    match cond {
        Value::Scalar(c) => Ok(if c != 0.0 { then } else { otherwise.unwrap_or_else(|| Value::Series(ctx.empty())) }),
        Value::Array(_) => Err(type_error("the condition is an array of time series")),
        Value::Series(c) => {
            let out = c
                .iter()
                .enumerate()
                .map(|(i, point)| {
                    let c = (*point)?;
                    if c != 0.0 {
                        match &then {
                            Value::Scalar(s) => Some(*s),
                            // True with no value in the true series: 0 (the page's table).
                            Value::Series(s) => Some(s.get(i).copied().flatten().unwrap_or(0.0)),
                            Value::Array(_) => None,
                        }
                    } else {
                        match &otherwise {
                            Some(Value::Scalar(s)) => Some(*s),
                            Some(Value::Series(s)) => s.get(i).copied().flatten(),
                            _ => None,
                        }
                    }
                })
                .collect();
            Ok(Value::Series(out))
        }
    }
}

enum Filler {
    Scalar(f64),
    Series(Series),
    Mode(FillMode),
}

fn fill(series: &[Option<f64>], filler: &Filler, timestamps: &[i64]) -> Series {
    match filler {
        Filler::Scalar(s) => series.iter().map(|p| Some(p.unwrap_or(*s))).collect(),
        Filler::Series(f) => series.iter().zip(f).map(|(p, q)| p.or(*q)).collect(),
        Filler::Mode(FillMode::Repeat) => {
            let mut last = None;
            series
                .iter()
                .map(|p| {
                    if p.is_some() {
                        last = *p;
                    }
                    last
                })
                .collect()
        }
        Filler::Mode(FillMode::Linear) => (0..series.len())
            .map(|i| {
                if let Some(v) = series.get(i).copied().flatten() {
                    return Some(v);
                }
                let before = (0..i).rev().find_map(|j| series.get(j).copied().flatten().map(|v| (j, v)))?;
                let after = (i + 1..series.len()).find_map(|j| series.get(j).copied().flatten().map(|v| (j, v)))?;
                let t = |j: usize| timestamps.get(j).copied().unwrap_or(0) as f64;
                let (t0, t1, ti) = (t(before.0), t(after.0), t(i));
                if t1 == t0 {
                    return Some(before.1);
                }
                Some(before.1 + (after.1 - before.1) * (ti - t0) / (t1 - t0))
            })
            .collect(),
    }
}

fn diff(series: &[Option<f64>], timestamps: &[i64], per_second: bool) -> Series {
    let mut previous: Option<(i64, f64)> = None;
    series
        .iter()
        .enumerate()
        .map(|(i, point)| {
            let v = (*point)?;
            let t = timestamps.get(i).copied().unwrap_or(0);
            let out = previous.and_then(|(pt, pv)| {
                let d = v - pv;
                if per_second {
                    let dt = (t - pt) as f64;
                    (dt > 0.0).then_some(d / dt)
                } else {
                    Some(d)
                }
            });
            previous = Some((t, v));
            out
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    const M: Option<f64> = None;

    fn s(values: &[Option<f64>]) -> Series {
        values.to_vec()
    }

    fn run(text: &str, inputs: &[(&str, Series)]) -> Result<Value, MathError> {
        let len = inputs.first().map_or(4, |(_, s)| s.len());
        let timestamps: Vec<i64> = (0..len as i64).map(|i| i * 60).collect();
        let series: BTreeMap<String, Series> = inputs.iter().map(|(k, v)| ((*k).to_string(), v.clone())).collect();
        evaluate(&parse(text)?, &timestamps, &series)
    }

    fn series(text: &str, inputs: &[(&str, Series)]) -> Series {
        match run(text, inputs).unwrap() {
            Value::Series(s) => s,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn parses_precedence_and_prints_it() {
        let cases = [
            ("1 + 2 * 3", "(1 + (2 * 3))"),
            ("(1 + 2) * 3", "((1 + 2) * 3)"),
            ("-2 ^ 2", "-(2 ^ 2)"),
            ("a > 1 AND b < 2 OR NOT c", "(((a > 1) AND (b < 2)) OR NOT c)"),
            ("a && b || !c", "((a AND b) OR NOT c)"),
            (
                "IF(population > 0, errors / population, 0) / (1 - 0.99)",
                "(IF((population > 0), (errors / population), 0) / (1 - 0.99))",
            ),
            ("FILL(m1, REPEAT)", "FILL(m1, REPEAT)"),
            ("SUM([m1, m2]) / 2", "(SUM([m1, m2]) / 2)"),
            ("1.5e2 - .5", "(150 - 0.5)"),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text).unwrap().to_string(), want, "{text}");
        }
    }

    #[test]
    fn errors_name_what_is_not_supported() {
        let cases = [
            ("ANOMALY_DETECTION_BAND(m1, 2)", MathError::UnsupportedFunction("ANOMALY_DETECTION_BAND".into())),
            ("SUM(METRICS())", MathError::UnsupportedFunction("METRICS".into())),
            ("fill(m1, 0)", MathError::UnsupportedFunction("fill".into())),
            ("m1 / PERIOD", MathError::UnsupportedConstruct("PERIOD".into())),
            ("REPEAT + 1", MathError::UnsupportedConstruct("REPEAT outside FILL's second argument".into())),
            ("DIFF(m1, m2)", MathError::Arity { function: "DIFF", expected: "1", found: 2 }),
            ("IF(m1)", MathError::Arity { function: "IF", expected: "2 or 3", found: 1 }),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text).unwrap_err(), want, "{text}");
        }
        assert!(matches!(parse("SEARCH('{AWS/EC2}', 'Sum', 60)"), Err(MathError::UnsupportedConstruct(_))));
        assert!(matches!(parse("m1 +"), Err(MathError::UnexpectedEnd { .. })));
        assert!(matches!(parse("m1 m2"), Err(MathError::UnexpectedToken { .. })));
        assert!(matches!(parse("m1 % 2"), Err(MathError::UnexpectedChar { found: '%', .. })));
    }

    #[test]
    fn ids_are_collected() {
        let expr = parse("IF(population > 0, errors / population, 0)").unwrap();
        assert_eq!(expr.ids().into_iter().collect::<Vec<_>>(), vec!["errors", "population"]);
    }

    /// "Using metric math", Comparison and logical operators: metric1 = [30, 20, 0, 0],
    /// metric2 = [20, -, 20, -]; the page's table of outputs.
    #[test]
    fn comparison_table_of_the_metric_math_page() {
        let inputs = [
            ("metric1", s(&[Some(30.0), Some(20.0), Some(0.0), Some(0.0)])),
            ("metric2", s(&[Some(20.0), M, Some(20.0), M])),
        ];
        let cases = [
            ("(metric1 < metric2)", [0.0, 0.0, 1.0, 0.0]),
            ("(metric1 >= 30)", [1.0, 0.0, 0.0, 0.0]),
            ("(metric1 > 15 AND metric2 > 15)", [1.0, 0.0, 0.0, 0.0]),
        ];
        for (text, want) in cases {
            assert_eq!(series(text, &inputs), want.map(Some).to_vec(), "{text}");
        }
    }

    /// "Using metric math", Basic arithmetic: missing values count as 0 between two series,
    /// division by zero drops the point; a scalar keeps the series' gaps.
    #[test]
    fn arithmetic_with_missing_points() {
        let inputs = [("a", s(&[Some(6.0), M, Some(1.0), M])), ("b", s(&[Some(2.0), Some(3.0), Some(0.0), M]))];
        assert_eq!(series("a + b", &inputs), s(&[Some(8.0), Some(3.0), Some(1.0), M]));
        assert_eq!(series("a - b", &inputs), s(&[Some(4.0), Some(-3.0), Some(1.0), M]));
        assert_eq!(series("a / b", &inputs), s(&[Some(3.0), Some(0.0), M, M]));
        assert_eq!(series("b / a", &inputs), s(&[Some(1.0 / 3.0), M, Some(0.0), M]));
        assert_eq!(series("a * 10", &inputs), s(&[Some(60.0), M, Some(10.0), M]));
        assert_eq!(series("10 - a", &inputs), s(&[Some(4.0), M, Some(9.0), M]));
        assert_eq!(series("-a", &inputs), s(&[Some(-6.0), M, Some(-1.0), M]));
        assert_eq!(series("a ^ 2", &inputs), s(&[Some(36.0), M, Some(1.0), M]));
        assert_eq!(series("a / 0", &inputs), s(&[M, M, M, M]));
        assert_eq!(series("a != b", &inputs), s(&[Some(1.0), Some(1.0), Some(1.0), M]));
        assert_eq!(series("NOT b", &inputs), s(&[Some(0.0), Some(0.0), Some(1.0), M]));
        assert_eq!(series("a OR b", &inputs), s(&[Some(1.0), Some(1.0), Some(1.0), M]));
        assert_eq!(run("1 + 2 * 3", &inputs).unwrap(), Value::Scalar(7.0));
        assert_eq!(run("1 / 0", &inputs).unwrap(), Value::Series(vec![M; 4]), "a scalar division by zero is no value");
    }

    /// "Using metric math", Using IF expressions: the page's three tables, and the omitted
    /// false branch.
    #[test]
    fn if_tables_of_the_metric_math_page() {
        let inputs = [
            ("metric1", s(&[Some(1.0), Some(1.0), Some(0.0), Some(0.0), M])),
            ("metric2", s(&[Some(30.0), M, Some(0.0), Some(0.0), Some(30.0)])),
            ("metric3", s(&[Some(0.0), Some(0.0), Some(20.0), M, Some(20.0)])),
        ];
        let cases = [
            ("IF(metric1, metric2, metric3)", s(&[Some(30.0), Some(0.0), Some(20.0), M, M])),
            ("IF(metric1, 5, metric3)", s(&[Some(5.0), Some(5.0), Some(20.0), M, M])),
            ("IF(metric1, metric2, 5)", s(&[Some(30.0), Some(0.0), Some(5.0), Some(5.0), M])),
            ("IF(metric1, metric2)", s(&[Some(30.0), Some(0.0), M, M, M])),
            ("IF(metric3 > 10, 1, 0)", s(&[Some(0.0), Some(0.0), Some(1.0), M, Some(1.0)])),
            ("IF(1, metric2, metric3)", inputs[1].1.clone()),
            ("IF(0, metric2, metric3)", inputs[2].1.clone()),
            ("IF(0, metric2)", vec![M; 5]),
        ];
        for (text, want) in cases {
            assert_eq!(series(text, &inputs), want, "{text}");
        }
    }

    #[test]
    fn fill_with_a_value_a_series_repeat_and_linear() {
        let inputs = [("x", s(&[M, Some(2.0), M, M, Some(8.0), M])), ("y", s(&[Some(9.0), M, Some(7.0), M, M, M]))];
        let cases = [
            ("FILL(x, 0)", s(&[Some(0.0), Some(2.0), Some(0.0), Some(0.0), Some(8.0), Some(0.0)])),
            ("FILL(x, y)", s(&[Some(9.0), Some(2.0), Some(7.0), M, Some(8.0), M])),
            ("FILL(x, REPEAT)", s(&[M, Some(2.0), Some(2.0), Some(2.0), Some(8.0), Some(8.0)])),
            ("FILL(x, LINEAR)", s(&[M, Some(2.0), Some(4.0), Some(6.0), Some(8.0), M])),
            ("FILL(x, 0) + FILL(y, 0)", s(&[Some(9.0), Some(2.0), Some(7.0), Some(0.0), Some(8.0), Some(0.0)])),
        ];
        for (text, want) in cases {
            assert_eq!(series(text, &inputs), want, "{text}");
        }
        assert!(matches!(run("FILL(1, 0)", &inputs), Err(MathError::Type { .. })));
    }

    /// DIFF of a sawtooth: 0 1 2 0 1 2 → first point missing, then +1 +1 -2 +1 +1; a gap
    /// uses the preceding value that exists. RATE divides by the seconds between the values.
    #[test]
    fn diff_and_rate_of_a_sawtooth() {
        let saw = s(&[Some(0.0), Some(1.0), Some(2.0), Some(0.0), Some(1.0), Some(2.0)]);
        assert_eq!(
            series("DIFF(x)", &[("x", saw.clone())]),
            s(&[M, Some(1.0), Some(1.0), Some(-2.0), Some(1.0), Some(1.0)])
        );
        assert_eq!(
            series("RATE(x)", &[("x", saw)]),
            s(&[M, Some(1.0 / 60.0), Some(1.0 / 60.0), Some(-2.0 / 60.0), Some(1.0 / 60.0), Some(1.0 / 60.0)])
        );
        let gappy = s(&[Some(5.0), M, Some(9.0), Some(3.0)]);
        assert_eq!(series("DIFF(x)", &[("x", gappy.clone())]), s(&[M, M, Some(4.0), Some(-6.0)]));
        assert_eq!(series("RATE(x)", &[("x", gappy)]), s(&[M, M, Some(4.0 / 120.0), Some(-6.0 / 60.0)]));
    }

    #[test]
    fn aggregates_over_a_series_and_across_an_array() {
        let inputs = [("a", s(&[Some(1.0), M, Some(4.0), M])), ("b", s(&[Some(3.0), Some(2.0), M, M]))];
        assert_eq!(run("SUM(a)", &inputs).unwrap(), Value::Scalar(5.0));
        assert_eq!(run("AVG(a)", &inputs).unwrap(), Value::Scalar(2.5));
        assert_eq!(run("MIN(b)", &inputs).unwrap(), Value::Scalar(2.0));
        assert_eq!(run("MAX(b)", &inputs).unwrap(), Value::Scalar(3.0));
        assert_eq!(series("a - AVG(a)", &inputs), s(&[Some(-1.5), M, Some(1.5), M]));
        assert_eq!(series("SUM([a, b])", &inputs), s(&[Some(4.0), Some(2.0), Some(4.0), M]));
        assert_eq!(series("AVG([a, b])", &inputs), s(&[Some(2.0), Some(1.0), Some(2.0), M]));
        assert_eq!(series("MIN([a, b])", &inputs), s(&[Some(1.0), Some(2.0), Some(4.0), M]));
        assert_eq!(series("MAX([a, b, 2])", &inputs), s(&[Some(3.0), Some(2.0), Some(4.0), Some(2.0)]));
        assert_eq!(series("SUM(100 / [a, b])", &inputs), s(&[Some(100.0 + 100.0 / 3.0), Some(50.0), Some(25.0), M]));
        let empty = [("a", vec![M; 3])];
        assert_eq!(series("a + SUM(a)", &empty), vec![M; 3], "the sum of nothing is no value");
    }

    #[test]
    fn abs_ceil_floor() {
        let inputs = [("x", s(&[Some(-1.5), M, Some(2.25)]))];
        assert_eq!(series("ABS(x)", &inputs), s(&[Some(1.5), M, Some(2.25)]));
        assert_eq!(series("CEIL(x)", &inputs), s(&[Some(-1.0), M, Some(3.0)]));
        assert_eq!(series("FLOOR(x)", &inputs), s(&[Some(-2.0), M, Some(2.0)]));
    }

    #[test]
    fn the_final_result_must_be_one_series() {
        let ts = [0, 60];
        let inputs: BTreeMap<String, Series> = [("a".to_string(), vec![Some(1.0), None])].into();
        assert_eq!(evaluate_series(&parse("a * 2").unwrap(), &ts, &inputs), Ok(vec![Some(2.0), None]));
        assert_eq!(
            evaluate_series(&parse("SUM(a)").unwrap(), &ts, &inputs),
            Err(MathError::NotATimeSeries("a scalar"))
        );
        assert_eq!(
            evaluate_series(&parse("[a, a]").unwrap(), &ts, &inputs),
            Err(MathError::NotATimeSeries("an array of time series"))
        );
        assert_eq!(evaluate_series(&parse("b").unwrap(), &ts, &inputs), Err(MathError::UnknownId("b".into())));
    }

    /// The template's ThrottleRatioAlarm expression: no attempts → 0, never a division by zero.
    #[test]
    fn throttle_ratio_expression() {
        let inputs =
            [("attempts", s(&[M, Some(100.0), Some(50.0), M])), ("throttled", s(&[M, Some(2.0), M, Some(1.0)]))];
        assert_eq!(
            series("IF(FILL(attempts, 0) > 0, FILL(throttled, 0) / FILL(attempts, 0), 0)", &inputs),
            s(&[Some(0.0), Some(0.02), Some(0.0), Some(0.0)])
        );
    }
}
