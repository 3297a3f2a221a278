//! Custom scenes: loading files, error messages, and the effects language.

use agentd_mock::{Scene, SceneError};

use crate::support::*;

#[test]
fn errors_name_the_file_the_field_and_the_position() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("bad.json");
    let text = "{\n  \"screens\": [\n    {\n      \"id\": \"main\",\n      \"windows\": [{\"widgets\": [{\"button\": {\"id\": \"b\", \"text\": \"B\", \"colour\": 1}}]}]\n    }\n  ]\n}\n";
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
    let message = Scene::load(&path).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(message.starts_with(&format!("{}:5:", path.display())), "{message}");
    assert!(message.contains("screens[0].windows[0].widgets[0].button.colour"), "{message}");
    assert!(message.contains("unknown field `colour`"), "{message}");

    let wrong_type = r#"{"screens": [{"id": "main", "windows": [{"widgets": [{"checkbox": {"id": "c", "text": "C", "checked": "yes"}}]}]}]}"#;
    match Scene::from_json_str(wrong_type, "inline.json") {
        Err(SceneError::Invalid { path, line, column, message, .. }) => {
            assert_eq!(path, "screens[0].windows[0].widgets[0].checkbox.checked");
            assert_eq!(line, 1);
            assert!(column > 80, "{column}");
            assert!(message.contains("expected a boolean"), "{message}");
        }
        other => panic!("{other:?}"),
    }

    let bad_goto = "{\"screens\": [\n{\"id\": \"main\", \"windows\": [{\"widgets\": [\n{\"button\": {\"id\": \"b\", \"text\": \"B\", \"on_click\": [{\"if\": {\"when\": {\"checked\": \"b\"}, \"then\": []}}]}}]}]}]}";
    let message = Scene::from_json_str(bad_goto, "s.json").err().map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("s.json:3:"), "{message}");
    assert!(message.contains("on_click[0].if.when.checked"), "{message}");
    assert!(message.contains("not a checkbox"), "{message}");

    let unknown_widget = r#"{"screens": [{"id": "main", "windows": [{"widgets": [{"spinner": {}}]}]}]}"#;
    let message = Scene::from_json_str(unknown_widget, "s.json").err().map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("unknown variant `spinner`"), "{message}");

    assert!(matches!(Scene::resolve("no/such/scene.json", None), Err(SceneError::NotFound { .. })));
    let message = Scene::resolve("logn", None).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("blank, login, form"), "{message}");
}

const COUNTER: &str = r##"{
  "name": "counter",
  "background": "#202020",
  "taskbar": false,
  "screens": [
    {
      "id": "main",
      "focus": "name",
      "default_button": "greet",
      "windows": [
        {
          "title": "Greeter for ${name}",
          "position": "top_left",
          "widgets": [
            { "text_field": { "id": "name", "label": "Name", "max_length": 5 } },
            { "slider": { "id": "level", "min": 0, "max": 10, "step": 2, "value": 4 } },
            { "dropdown": { "id": "color", "options": ["red", "green"], "value": "red" } },
            { "label": { "id": "out", "text": "" } },
            { "button": { "id": "greet", "text": "Greet", "on_click": [
              { "if": { "when": { "any": [ { "empty": "name" }, { "not": { "equals": { "field": "color", "value": "green" } } } ] },
                        "then": [ { "set": { "id": "out", "value": "need a name and green" } } ],
                        "else": [ { "set": { "id": "out", "value": "Hi ${name} at ${level}" } }, { "goto": "second" } ] } }
            ] } },
            { "button": { "id": "fill", "text": "Fill", "inline": true, "on_click": [
              { "set": { "id": "name", "value": "Zed" } },
              { "set": { "id": "color", "value": "green" } },
              { "set": { "id": "level", "value": 10 } },
              { "focus": "greet" }
            ] } }
          ]
        }
      ]
    },
    { "id": "second", "windows": [ { "style": "panel", "widgets": [
      { "label": { "text": "Cost: $$${level}" } },
      { "button": { "id": "back", "text": "Back", "on_click": [ { "reset": [] }, { "goto": "main" } ] } }
    ] } ] }
  ]
}"##;

#[test]
fn custom_scenes_run_their_effects() {
    let d = custom(COUNTER);
    assert_eq!(state(&d).focused.as_deref(), Some("name"));
    type_text(&d, "Alexander\n");
    assert_eq!(field(&d, "name"), "Alexa", "max_length stops typing");
    assert_eq!(label(&d, "out"), "need a name and green");
    click(&d, "fill");
    let s = state(&d);
    assert_eq!(s.fields["name"], "Zed");
    assert_eq!(s.selections["color"].as_deref(), Some("green"));
    assert_eq!(s.sliders["level"], 10);
    assert_eq!(s.focused.as_deref(), Some("greet"));
    keys(&d, "Return");
    let s = state(&d);
    assert_eq!(s.screen, "second");
    assert_eq!(s.labels["out"], "Hi Zed at 10");
    click(&d, "back");
    let s = state(&d);
    assert_eq!(s.screen, "main");
    assert_eq!(s.fields["name"], "");
    assert_eq!(s.sliders["level"], 4);
    assert_eq!(s.clicked, vec!["greet", "fill", "greet", "back"]);
}

#[test]
fn builtin_scene_files_are_the_embedded_ones() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenes");
    for name in Scene::builtin_names() {
        let on_disk = std::fs::read_to_string(dir.join(format!("{name}.json"))).unwrap_or_default();
        assert_eq!(Some(on_disk.as_str()), Scene::builtin_json(name));
        let loaded = Scene::resolve(&format!("{name}.json"), Some(&dir)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(loaded.name(), name);
    }
}

#[test]
fn the_example_in_scenes_md_is_a_valid_scene() {
    let doc = include_str!("../../SCENES.md");
    let start = doc.find("## A complete example").unwrap_or_else(|| panic!("no example section"));
    let body = &doc[start..];
    let open = body.find("```json\n").unwrap_or_else(|| panic!("no json block")) + "```json\n".len();
    let close = body[open..].find("```").unwrap_or_else(|| panic!("unclosed block")) + open;
    let d = custom(&body[open..close]);
    type_text(&d, "me@example.com");
    click(&d, "agree");
    keys(&d, "Return");
    assert_eq!(state(&d).screen, "thanks");
}
