//! Helpers shared by the integration tests: building desktops and sending actions tersely.

use agentd_computer::{Action, MouseButton, Point, Size};
use agentd_mock::{MockDesktop, MockState, Scene};

pub fn desktop(scene: &str) -> MockDesktop {
    sized(scene, None)
}

pub fn sized(scene: &str, size: Option<Size>) -> MockDesktop {
    let scene = Scene::resolve(scene, None).unwrap_or_else(|e| panic!("scene {scene}: {e}"));
    MockDesktop::new(scene, size).unwrap_or_else(|e| panic!("desktop: {e}"))
}

pub fn custom(json: &str) -> MockDesktop {
    let scene = Scene::from_json_str(json, "test.json").unwrap_or_else(|e| panic!("{e}"));
    MockDesktop::new(scene, None).unwrap_or_else(|e| panic!("desktop: {e}"))
}

pub fn act(d: &MockDesktop, action: Action) {
    let summary = action.summary();
    if let Err(e) = d.apply(&action) {
        panic!("{summary}: {e}");
    }
}

pub fn center(d: &MockDesktop, id: &str) -> Point {
    d.widget_center(id).unwrap_or_else(|| panic!("widget {id} is not visible on screen {}", d.mock_state().screen))
}

pub fn click_at(d: &MockDesktop, p: Point) {
    act(d, Action::Click { x: p.x, y: p.y, button: MouseButton::Left, keys: vec![] });
}

pub fn click(d: &MockDesktop, id: &str) {
    click_at(d, center(d, id));
}

pub fn type_text(d: &MockDesktop, text: &str) {
    act(d, Action::Type { text: text.into() });
}

pub fn keys(d: &MockDesktop, chord: &str) {
    act(d, Action::Keypress { keys: chord.split('+').map(String::from).collect() });
}

pub fn state(d: &MockDesktop) -> MockState {
    d.mock_state()
}

pub fn field(d: &MockDesktop, id: &str) -> String {
    state(d).fields.get(id).cloned().unwrap_or_else(|| panic!("no field {id}"))
}

pub fn label(d: &MockDesktop, id: &str) -> String {
    state(d).labels.get(id).cloned().unwrap_or_else(|| panic!("no label {id}"))
}
