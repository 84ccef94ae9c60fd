//! CloudFormation intrinsic functions, in short-tag (`!Ref X`) and long (`{"Ref": "X"}`) form,
//! resolved to plain JSON values against the template's parameters, conditions and resources
//! (Intrinsic function reference,
//! <https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/intrinsic-function-reference.html>).
//!
//! `Ref` of a parameter is its value (a list for `CommaDelimitedList`/`List<…>` types); of a
//! resource, its logical id (the drill uses logical ids as physical names); of a pseudo
//! parameter, the [`Options`] value (`AWS::URLSuffix` is `amazonaws.com`); `AWS::NoValue` removes
//! the property or list element. `Fn::GetAtt X.QueueName` is `X`, `X.Arn` is
//! `arn:{partition}:{service}:{region}:{account}:X` (service from the resource type), any other
//! attribute is `X.Attr`. Supported: `Ref`, `Fn::Sub` (string, and `[string, variables]`),
//! `Fn::GetAtt`, `Fn::If`, `Fn::Equals`, `Fn::Not`, `Fn::And`, `Fn::Or`, `Condition`,
//! `Fn::Join`, `Fn::Select`, `Fn::Split`. Anything else is an error naming the alarm and the
//! function.

use std::collections::BTreeMap;

use serde_json::Value as J;
use serde_norway::Mapping;
use serde_norway::Value as Y;

use super::{Options, TemplateError};

/// Deeper than this is a condition or value that refers to itself.
const MAX_DEPTH: usize = 64;

/// A declared parameter.
pub(super) struct Param<'a> {
    pub default: Option<&'a Y>,
    pub list: bool,
}

/// What intrinsics resolve against.
pub(super) struct Resolver<'a> {
    pub opts: &'a Options,
    pub parameters: BTreeMap<String, Param<'a>>,
    pub conditions: Option<&'a Mapping>,
    /// Logical id → resource type.
    pub resources: BTreeMap<String, Option<String>>,
}

fn malformed(alarm: &str, function: &str, reason: &'static str) -> TemplateError {
    TemplateError::MalformedIntrinsic { alarm: alarm.to_string(), function: function.to_string(), reason }
}

/// A YAML number as JSON.
fn number(n: &serde_norway::Number) -> J {
    if let Some(i) = n.as_i64() {
        J::from(i)
    } else if let Some(u) = n.as_u64() {
        J::from(u)
    } else {
        n.as_f64().and_then(serde_json::Number::from_f64).map_or_else(|| J::String(n.to_string()), J::Number)
    }
}

/// A scalar as the string CloudFormation would substitute.
pub(super) fn scalar_string(value: &J) -> Option<String> {
    match value {
        J::String(s) => Some(s.clone()),
        J::Number(n) => Some(n.to_string()),
        J::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn yaml_scalar_string(value: &Y) -> Option<String> {
    match value {
        Y::String(s) => Some(s.clone()),
        Y::Number(n) => Some(n.to_string()),
        Y::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The function a short tag stands for: `!Ref` → `Ref`, `!Condition` → `Condition`,
/// `!Sub` → `Fn::Sub`.
fn tag_function(tag: &serde_norway::value::Tag) -> String {
    let text = tag.to_string();
    let name = text.trim_start_matches('!');
    match name {
        "Ref" | "Condition" => name.to_string(),
        _ => format!("Fn::{name}"),
    }
}

/// `{"Ref": …}` or `{"Fn::X": …}`: the function and its argument.
fn long_form(map: &Mapping) -> Option<(&str, &Y)> {
    if map.len() != 1 {
        return None;
    }
    let (key, arg) = map.iter().next()?;
    let key = key.as_str()?;
    (key == "Ref" || key.starts_with("Fn::")).then_some((key, arg))
}

impl Resolver<'_> {
    /// Resolves `value`; `None` is `AWS::NoValue`.
    pub fn resolve(&self, alarm: &str, value: &Y) -> Result<Option<J>, TemplateError> {
        self.value(alarm, value, 0)
    }

    /// The value of the named condition.
    pub fn condition(&self, alarm: &str, name: &str) -> Result<bool, TemplateError> {
        self.named_condition(alarm, name, 0)
    }

    fn value(&self, alarm: &str, value: &Y, depth: usize) -> Result<Option<J>, TemplateError> {
        if depth > MAX_DEPTH {
            return Err(TemplateError::TooDeep { alarm: alarm.to_string() });
        }
        Ok(Some(match value {
            Y::Null => J::Null,
            Y::Bool(b) => J::Bool(*b),
            Y::Number(n) => number(n),
            Y::String(s) => J::String(s.clone()),
            Y::Sequence(items) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    if let Some(v) = self.value(alarm, item, depth + 1)? {
                        out.push(v);
                    }
                }
                J::Array(out)
            }
            Y::Mapping(map) => {
                if let Some((function, arg)) = long_form(map) {
                    return self.intrinsic(alarm, function, arg, depth + 1);
                }
                let mut out = serde_json::Map::new();
                for (key, item) in map {
                    let key =
                        yaml_scalar_string(key).ok_or_else(|| malformed(alarm, "mapping", "a key is not a scalar"))?;
                    if let Some(v) = self.value(alarm, item, depth + 1)? {
                        out.insert(key, v);
                    }
                }
                J::Object(out)
            }
            Y::Tagged(tagged) => {
                let function = tag_function(&tagged.tag);
                return self.intrinsic(alarm, &function, &tagged.value, depth + 1);
            }
        }))
    }

    /// A value that must resolve to a scalar, as a string.
    fn string(&self, alarm: &str, function: &str, value: &Y, depth: usize) -> Result<String, TemplateError> {
        self.value(alarm, value, depth + 1)?
            .as_ref()
            .and_then(scalar_string)
            .ok_or_else(|| malformed(alarm, function, "an argument is not a string"))
    }

    fn args<'y>(&self, alarm: &str, function: &str, arg: &'y Y, count: usize) -> Result<&'y [Y], TemplateError> {
        match arg {
            Y::Sequence(items) if items.len() == count => Ok(items),
            _ => Err(malformed(alarm, function, "wrong number of arguments")),
        }
    }

    fn intrinsic(&self, alarm: &str, function: &str, arg: &Y, depth: usize) -> Result<Option<J>, TemplateError> {
        if depth > MAX_DEPTH {
            return Err(TemplateError::TooDeep { alarm: alarm.to_string() });
        }
        match function {
            "Ref" => {
                let name = self.string(alarm, function, arg, depth)?;
                self.reference(alarm, &name)
            }
            "Fn::Sub" => Ok(Some(J::String(self.sub(alarm, arg, depth)?))),
            "Fn::GetAtt" => {
                let (resource, attribute) = match arg {
                    Y::String(s) => match s.split_once('.') {
                        Some((r, a)) => (r.to_string(), a.to_string()),
                        None => return Err(malformed(alarm, function, "not Resource.Attribute")),
                    },
                    Y::Sequence(items) if items.len() == 2 => (
                        self.string(alarm, function, &items[0], depth)?,
                        self.string(alarm, function, &items[1], depth)?,
                    ),
                    _ => return Err(malformed(alarm, function, "not Resource.Attribute or [Resource, Attribute]")),
                };
                Ok(Some(J::String(self.get_att(alarm, &resource, &attribute)?)))
            }
            "Fn::If" => {
                let items = self.args(alarm, function, arg, 3)?;
                let name = yaml_scalar_string(&items[0])
                    .ok_or_else(|| malformed(alarm, function, "the condition is not a name"))?;
                let chosen = if self.named_condition(alarm, &name, depth + 1)? { &items[1] } else { &items[2] };
                self.value(alarm, chosen, depth + 1)
            }
            "Fn::Equals" | "Fn::Not" | "Fn::And" | "Fn::Or" | "Condition" => {
                Ok(Some(J::Bool(self.boolean_function(alarm, function, arg, depth)?)))
            }
            "Fn::Join" => {
                let items = self.args(alarm, function, arg, 2)?;
                let delimiter = self.string(alarm, function, &items[0], depth)?;
                let parts = match self.value(alarm, &items[1], depth + 1)? {
                    Some(J::Array(parts)) => parts,
                    _ => return Err(malformed(alarm, function, "the values are not a list")),
                };
                let parts: Option<Vec<String>> = parts.iter().map(scalar_string).collect();
                let parts = parts.ok_or_else(|| malformed(alarm, function, "a value is not a string"))?;
                Ok(Some(J::String(parts.join(&delimiter))))
            }
            "Fn::Select" => {
                let items = self.args(alarm, function, arg, 2)?;
                let index: usize = self
                    .string(alarm, function, &items[0], depth)?
                    .parse()
                    .map_err(|_| malformed(alarm, function, "the index is not a whole number"))?;
                match self.value(alarm, &items[1], depth + 1)? {
                    Some(J::Array(list)) => list
                        .into_iter()
                        .nth(index)
                        .map(Some)
                        .ok_or_else(|| malformed(alarm, function, "the index is out of range")),
                    _ => Err(malformed(alarm, function, "the values are not a list")),
                }
            }
            "Fn::Split" => {
                let items = self.args(alarm, function, arg, 2)?;
                let delimiter = self.string(alarm, function, &items[0], depth)?;
                let source = self.string(alarm, function, &items[1], depth)?;
                if delimiter.is_empty() {
                    return Err(malformed(alarm, function, "the delimiter is empty"));
                }
                Ok(Some(J::Array(source.split(delimiter.as_str()).map(|s| J::String(s.to_string())).collect())))
            }
            other => Err(TemplateError::UnsupportedIntrinsic { alarm: alarm.to_string(), function: other.to_string() }),
        }
    }

    fn boolean_function(&self, alarm: &str, function: &str, arg: &Y, depth: usize) -> Result<bool, TemplateError> {
        match function {
            "Fn::Equals" => {
                let items = self.args(alarm, function, arg, 2)?;
                let a = self.value(alarm, &items[0], depth + 1)?;
                let b = self.value(alarm, &items[1], depth + 1)?;
                Ok(match (a.as_ref().and_then(scalar_string), b.as_ref().and_then(scalar_string)) {
                    (Some(a), Some(b)) => a == b,
                    _ => a == b,
                })
            }
            "Fn::Not" => {
                let items = self.args(alarm, function, arg, 1)?;
                Ok(!self.boolean(alarm, &items[0], depth + 1)?)
            }
            "Fn::And" | "Fn::Or" => {
                let Y::Sequence(items) = arg else {
                    return Err(malformed(alarm, function, "the conditions are not a list"));
                };
                if items.len() < 2 || items.len() > 10 {
                    return Err(malformed(alarm, function, "takes 2 to 10 conditions"));
                }
                let mut values = Vec::with_capacity(items.len());
                for item in items {
                    values.push(self.boolean(alarm, item, depth + 1)?);
                }
                Ok(if function == "Fn::And" { values.iter().all(|v| *v) } else { values.iter().any(|v| *v) })
            }
            _ => {
                let name = self.string(alarm, function, arg, depth)?;
                self.named_condition(alarm, &name, depth + 1)
            }
        }
    }

    /// A condition expression: `{"Condition": name}`, a boolean intrinsic, or `true`/`false`.
    fn boolean(&self, alarm: &str, value: &Y, depth: usize) -> Result<bool, TemplateError> {
        if let Y::Mapping(map) = value
            && map.len() == 1
            && let Some(name) = map.get("Condition").and_then(Y::as_str)
        {
            return self.named_condition(alarm, name, depth + 1);
        }
        match self.value(alarm, value, depth + 1)? {
            Some(J::Bool(b)) => Ok(b),
            Some(J::String(s)) if s.eq_ignore_ascii_case("true") => Ok(true),
            Some(J::String(s)) if s.eq_ignore_ascii_case("false") => Ok(false),
            _ => Err(malformed(alarm, "condition", "not a boolean")),
        }
    }

    fn named_condition(&self, alarm: &str, name: &str, depth: usize) -> Result<bool, TemplateError> {
        if depth > MAX_DEPTH {
            return Err(TemplateError::TooDeep { alarm: alarm.to_string() });
        }
        let definition = self
            .conditions
            .and_then(|c| c.get(name))
            .ok_or_else(|| TemplateError::UnknownCondition { alarm: alarm.to_string(), condition: name.to_string() })?;
        self.boolean(alarm, definition, depth + 1)
    }

    /// `Ref name`.
    fn reference(&self, alarm: &str, name: &str) -> Result<Option<J>, TemplateError> {
        let pseudo = match name {
            "AWS::NoValue" => return Ok(None),
            "AWS::StackName" => Some(self.opts.stack_name.clone()),
            "AWS::Region" => Some(self.opts.region.clone()),
            "AWS::AccountId" => Some(self.opts.account_id.clone()),
            "AWS::Partition" => Some(self.opts.partition.clone()),
            "AWS::URLSuffix" => Some("amazonaws.com".to_string()),
            _ => None,
        };
        if let Some(value) = pseudo {
            return Ok(Some(J::String(value)));
        }
        if let Some(param) = self.parameters.get(name) {
            let value = match self.opts.parameters.get(name) {
                Some(value) => value.clone(),
                None => match param.default {
                    Some(default) => yaml_scalar_string(default).ok_or_else(|| TemplateError::InvalidParameter {
                        parameter: name.to_string(),
                        reason: "its Default is not a scalar",
                    })?,
                    None => {
                        return Err(TemplateError::MissingParameter {
                            alarm: alarm.to_string(),
                            parameter: name.to_string(),
                        });
                    }
                },
            };
            if param.list {
                return Ok(Some(J::Array(value.split(',').map(|s| J::String(s.trim().to_string())).collect())));
            }
            return Ok(Some(J::String(value)));
        }
        if self.resources.contains_key(name) {
            return Ok(Some(J::String(name.to_string())));
        }
        Err(TemplateError::UnknownReference { alarm: alarm.to_string(), name: name.to_string() })
    }

    /// `Fn::GetAtt resource.attribute`.
    fn get_att(&self, alarm: &str, resource: &str, attribute: &str) -> Result<String, TemplateError> {
        let Some(kind) = self.resources.get(resource) else {
            return Err(TemplateError::UnknownReference { alarm: alarm.to_string(), name: resource.to_string() });
        };
        Ok(match attribute {
            "QueueName" => resource.to_string(),
            "Arn" => {
                let o = self.opts;
                let service = service_of(kind.as_deref());
                format!("arn:{}:{service}:{}:{}:{resource}", o.partition, o.region, o.account_id)
            }
            _ => format!("{resource}.{attribute}"),
        })
    }

    /// `Fn::Sub`: `${X}` is a variable of the list form's map, a parameter, a pseudo parameter or
    /// a resource's logical id; `${X.Attr}` is `Fn::GetAtt`; `${!Literal}` is `${Literal}`.
    fn sub(&self, alarm: &str, arg: &Y, depth: usize) -> Result<String, TemplateError> {
        const F: &str = "Fn::Sub";
        let (text, variables) = match arg {
            Y::String(s) => (s.as_str(), None),
            Y::Sequence(items) if items.len() == 2 => match (&items[0], &items[1]) {
                (Y::String(s), Y::Mapping(m)) => (s.as_str(), Some(m)),
                _ => return Err(malformed(alarm, F, "not [string, {variables}]")),
            },
            _ => return Err(malformed(alarm, F, "not a string or [string, {variables}]")),
        };
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let end = after.find('}').ok_or_else(|| malformed(alarm, F, "a ${ is not closed"))?;
            let name = &after[..end];
            rest = &after[end + 1..];
            if let Some(literal) = name.strip_prefix('!') {
                out.push_str("${");
                out.push_str(literal);
                out.push('}');
                continue;
            }
            if let Some(value) = variables.and_then(|m| m.get(name)) {
                out.push_str(&self.string(alarm, F, value, depth)?);
            } else if !name.starts_with("AWS::")
                && let Some((resource, attribute)) = name.split_once('.')
            {
                out.push_str(&self.get_att(alarm, resource, attribute)?);
            } else {
                match self.reference(alarm, name)? {
                    Some(value) => {
                        out.push_str(&scalar_string(&value).ok_or_else(|| malformed(alarm, F, "a variable is a list"))?)
                    }
                    None => return Err(malformed(alarm, F, "AWS::NoValue in a string")),
                }
            }
        }
        out.push_str(rest);
        Ok(out)
    }
}

/// The ARN service of a resource type (`AWS::SQS::Queue` → `sqs`); SAM's types map to what
/// they create; `x` when there is no type.
fn service_of(kind: Option<&str>) -> String {
    match kind {
        Some("AWS::Serverless::Function") => "lambda".into(),
        Some("AWS::Serverless::SimpleTable") => "dynamodb".into(),
        Some("AWS::Serverless::Api" | "AWS::Serverless::HttpApi") => "apigateway".into(),
        Some("AWS::Serverless::StateMachine") => "states".into(),
        Some(kind) => kind.split("::").nth(1).map_or_else(|| "x".into(), str::to_ascii_lowercase),
        None => "x".into(),
    }
}
