//! Whole flows: the conformance kit, logging in, submitting the form, and determinism.

use agentd_computer::conformance::{self, Options};
use agentd_computer::{Action, ComputerProvider, MouseButton, Point, ProviderError};
use agentd_mock::{MockDesktop, Scene};

use crate::support::*;

#[tokio::test]
async fn conformance_kit_passes_on_every_builtin_scene() {
    for name in Scene::builtin_names() {
        let d = desktop(name);
        let options = Options { static_screen: true, ..Default::default() };
        conformance::run(&d, &options).await.assert_passed();
        assert_eq!(d.kind(), "mock");
    }
}

#[tokio::test]
async fn login_with_the_right_password_reaches_welcome_then_reports() {
    let d = desktop("login");
    assert_eq!(state(&d).screen, "login");
    click(&d, "username");
    type_text(&d, "alice");
    keys(&d, "Tab");
    type_text(&d, "hunter2");
    keys(&d, "Return");
    let s = state(&d);
    assert_eq!(s.screen, "welcome");
    assert_eq!(s.fields["username"], "alice");
    assert_eq!(s.fields["password"], "hunter2");
    assert_eq!(s.labels["greeting"], "Welcome, alice");
    assert_eq!(s.clicked, vec!["sign_in"]);
    let reports = center(&d, "reports");
    click_at(&d, reports);
    assert_eq!(state(&d).screen, "reports");
    assert_eq!(state(&d).screens_visited, vec!["login", "welcome", "reports"]);

    // computer_state is the same report as JSON.
    let json = d.state().await.unwrap_or_default();
    assert_eq!(json["screen"], "reports");
    assert_eq!(json["fields"]["username"], "alice");
    assert_eq!(json["pointer"]["x"], reports.x);
    assert_eq!(json["pointer"]["y"], reports.y);
    assert!(json["actions_received"].as_u64().unwrap_or(0) >= 6);
}

#[tokio::test]
async fn login_with_a_wrong_password_shows_an_error() {
    let d = desktop("login");
    let before = d.frame();
    click(&d, "username");
    type_text(&d, "alice");
    click(&d, "password");
    type_text(&d, "letmein\n");
    let s = state(&d);
    assert_eq!(s.screen, "login");
    assert_eq!(s.labels["error"], "Invalid username or password");
    assert_eq!(s.fields["password"], "", "the password field is cleared");
    assert_eq!(s.focused.as_deref(), Some("password"));
    // The error is really on screen: red text inside the error label's box.
    let (p, size) = d.widget_bounds("error").unwrap_or_else(|| panic!("error label not visible"));
    let frame = d.frame();
    let crop = frame.crop(p, size);
    let red = crop.as_rgb().chunks_exact(3).filter(|px| px[0] > 150 && px[1] < 100 && px[2] < 100).count();
    assert!(red > 50, "only {red} red pixels in the error label");
    assert!(frame.changed_pixels(&before) > 1000);
    // Then the right password works.
    type_text(&d, "hunter2\n");
    assert_eq!(state(&d).screen, "welcome");
}

#[tokio::test]
async fn sign_out_resets_the_password_and_returns_to_login() {
    let d = desktop("login");
    click(&d, "username");
    type_text(&d, "alice\thunter2\n");
    assert_eq!(state(&d).screen, "welcome");
    click(&d, "sign_out");
    let s = state(&d);
    assert_eq!(s.screen, "login");
    assert_eq!(s.fields["username"], "alice", "only the listed widgets are reset");
    assert_eq!(s.fields["password"], "");
}

#[tokio::test]
async fn exporting_a_report_needs_a_selection() {
    let d = desktop("login");
    click(&d, "username");
    type_text(&d, "alice\thunter2\n");
    keys(&d, "Return");
    assert_eq!(state(&d).screen, "reports", "Enter activates the default button of the welcome screen");
    keys(&d, "Return");
    assert_eq!(label(&d, "report_status"), "Select a report first");
    let (p, _) = d.widget_bounds("report").unwrap_or_else(|| panic!("list not visible"));
    click_at(&d, Point::new(p.x + 40, p.y + 26 * 2 + 10));
    assert_eq!(state(&d).selections["report"].as_deref(), Some("March"));
    click(&d, "export");
    assert_eq!(label(&d, "report_status"), "Exported the March report");
}

fn fill_form(d: &MockDesktop) {
    click(d, "full_name");
    type_text(d, "Jane Doe\tjane@example.com\tAcme Ltd");
    click(d, "country");
    // The popup lists the options below the dropdown; type-ahead picks Germany.
    type_text(d, "g");
    keys(d, "Return");
    click(d, "terms");
    click(d, "newsletter");
}

#[tokio::test]
async fn the_form_submits_to_a_confirmation_showing_the_values() {
    let d = desktop("form");
    assert_eq!(state(&d).focused.as_deref(), Some("full_name"));
    fill_form(&d);
    let s = state(&d);
    assert_eq!(s.selections["country"].as_deref(), Some("Germany"));
    assert!(s.checkboxes["terms"] && s.checkboxes["newsletter"]);
    click(&d, "submit");
    let s = state(&d);
    assert_eq!(s.screen, "confirmation", "{s:?}");
    assert_eq!(s.clicked, vec!["submit"]);
    let done = d.widget_center("done");
    assert!(done.is_some());
    click(&d, "done");
    assert_eq!(state(&d).screen, "done");
}

#[tokio::test]
async fn an_incomplete_form_is_refused_with_a_message() {
    let d = desktop("form");
    type_text(&d, "Jane\n");
    let s = state(&d);
    assert_eq!(s.screen, "form");
    assert!(s.labels["error"].contains("accept the terms"), "{:?}", s.labels);
    click(&d, "reset");
    let s = state(&d);
    assert_eq!(s.fields["full_name"], "");
    assert_eq!(s.labels["error"], "");
    assert_eq!(s.selections["plan"].as_deref(), Some("Free"));
}

fn script() -> Vec<Action> {
    vec![
        Action::Click { x: 640, y: 371, button: MouseButton::Left, keys: vec![] },
        Action::Type { text: "alice".into() },
        Action::Keypress { keys: vec!["shift".into(), "Home".into()] },
        Action::Keypress { keys: vec!["ctrl".into(), "c".into()] },
        Action::Keypress { keys: vec!["Tab".into()] },
        Action::Type { text: "hunter".into() },
        Action::Move { x: 100, y: 100, keys: Vec::new() },
        Action::Scroll { x: 640, y: 400, scroll_x: 0, scroll_y: 50, keys: Vec::new() },
        Action::Drag {
            path: vec![Point::new(10, 10), Point::new(300, 300)],
            button: Default::default(),
            keys: Vec::new(),
        },
        Action::Click { x: 458, y: 483, button: MouseButton::Left, keys: vec![] },
        Action::Click { x: 500, y: 500, button: MouseButton::Right, keys: vec![] },
        Action::Type { text: "2".into() },
    ]
}

#[tokio::test]
async fn the_same_actions_give_byte_identical_frames() {
    let run = || {
        let d = desktop("login");
        let mut digests = vec![d.frame().digest()];
        for action in script() {
            let _ = d.apply(&action);
            digests.push(d.frame().digest());
        }
        (digests, d.frame(), state(&d))
    };
    let (a, frame_a, state_a) = run();
    let (b, frame_b, state_b) = run();
    assert_eq!(a, b);
    assert!(frame_a == frame_b);
    assert_eq!(state_a, state_b);
    // The cache never shows something a fresh render would not.
    let d = desktop("form");
    for action in script() {
        let _ = d.apply(&action);
        assert!(d.frame() == d.render_uncached(), "after {}", action.summary());
    }
}

#[tokio::test]
async fn bad_actions_are_tool_errors_and_are_recorded() {
    let d = desktop("login");
    let off = Action::Click { x: 5000, y: 1, button: MouseButton::Left, keys: vec![] };
    assert!(matches!(d.perform(&off).await, Err(ProviderError::InvalidAction(_))));
    let key = Action::Keypress { keys: vec!["hyperdrive".into()] };
    match d.perform(&key).await {
        Err(ProviderError::InvalidAction(m)) => assert!(m.contains("hyperdrive"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(d.actions(), vec![off, key]);
    assert_eq!(state(&d).actions_received, 2);
    let shot = d.perform(&Action::Screenshot {}).await;
    assert!(shot.is_ok());
}

#[tokio::test]
async fn cursor_position_reports_the_pointer_and_right_click_only_moves_it() {
    let d = desktop("login");
    let before = state(&d);
    d.perform(&Action::Click { x: 33, y: 44, button: MouseButton::Right, keys: vec![] }).await.ok();
    let report = d.perform(&Action::CursorPosition {}).await.unwrap_or_default();
    assert_eq!(report.cursor, Some(Point::new(33, 44)));
    let after = state(&d);
    assert_eq!(after.fields, before.fields);
    assert_eq!(after.screen, before.screen);
    assert_eq!(d.actions().len(), 2);
}

#[tokio::test]
async fn wait_and_hold_key_take_their_time() {
    let d = desktop("blank");
    let start = std::time::Instant::now();
    d.perform(&Action::Wait { duration_ms: 30 }).await.ok();
    d.perform(&Action::HoldKey { keys: vec!["shift".into()], duration_ms: 30 }).await.ok();
    assert!(start.elapsed() >= std::time::Duration::from_millis(60));
    assert_eq!(state(&d).actions_received, 2);
}
