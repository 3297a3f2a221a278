//! Each widget's behaviour under pointer and keyboard.

use agentd_computer::{Action, MouseButton, Point, Size};

use crate::support::*;

fn focused(d: &agentd_mock::MockDesktop) -> Option<String> {
    state(d).focused
}

#[test]
fn text_fields_edit_like_a_desktop_toolkit() {
    let d = desktop("form");
    click(&d, "company");
    type_text(&d, "helo");
    keys(&d, "Left");
    type_text(&d, "l");
    assert_eq!(field(&d, "company"), "hello");
    keys(&d, "End");
    type_text(&d, " world");
    keys(&d, "Home");
    keys(&d, "Delete");
    assert_eq!(field(&d, "company"), "ello world");
    keys(&d, "End");
    keys(&d, "BackSpace");
    keys(&d, "ctrl+BackSpace");
    assert_eq!(field(&d, "company"), "ello ");
    keys(&d, "ctrl+a");
    type_text(&d, "Acme");
    assert_eq!(field(&d, "company"), "Acme", "typing replaces a select-all");
    keys(&d, "ctrl+a");
    keys(&d, "BackSpace");
    assert_eq!(field(&d, "company"), "");
    type_text(&d, "abc");
    keys(&d, "shift+Home");
    type_text(&d, "x");
    assert_eq!(field(&d, "company"), "x", "typing replaces a shift-selection");
    keys(&d, "shift+A");
    assert_eq!(field(&d, "company"), "xA");
}

#[test]
fn double_click_selects_a_word_and_triple_click_everything() {
    let d = desktop("form");
    click(&d, "company");
    type_text(&d, "hello world");
    let (p, size) = d.widget_bounds("company").unwrap_or_else(|| panic!("company not visible"));
    let y = p.y + size.height as i32 / 2;
    act(&d, Action::DoubleClick { x: p.x + 9 + 60, y });
    type_text(&d, "there");
    assert_eq!(field(&d, "company"), "hello there");
    act(&d, Action::TripleClick { x: p.x + 20, y });
    type_text(&d, "all new");
    assert_eq!(field(&d, "company"), "all new");
    // A click puts the caret where it lands: at the start here.
    click_at(&d, Point::new(p.x + 2, y));
    type_text(&d, ">");
    assert_eq!(field(&d, "company"), ">all new");
}

#[test]
fn copy_and_paste_go_through_the_mock_clipboard() {
    let d = desktop("form");
    click(&d, "full_name");
    type_text(&d, "Jane");
    keys(&d, "ctrl+a");
    keys(&d, "ctrl+c");
    click(&d, "company");
    keys(&d, "ctrl+v");
    keys(&d, "ctrl+v");
    assert_eq!(field(&d, "company"), "JaneJane");
    keys(&d, "ctrl+a");
    keys(&d, "ctrl+x");
    assert_eq!(field(&d, "company"), "");
}

#[test]
fn passwords_are_drawn_as_bullets_but_reported_in_clear() {
    let d = desktop("login");
    click(&d, "password");
    let (p, size) = d.widget_bounds("password").unwrap_or_else(|| panic!("password not visible"));
    let empty = d.frame().crop(p, size);
    type_text(&d, "hunter2");
    let typed = d.frame().crop(p, size);
    assert!(typed.changed_pixels(&empty) > 40);
    assert_eq!(field(&d, "password"), "hunter2");
    // Bullets: the same text in a plain field draws differently.
    click(&d, "username");
    type_text(&d, "hunter2");
    let (u, _) = d.widget_bounds("username").unwrap_or_else(|| panic!("username not visible"));
    let plain = d.frame().crop(u, size);
    assert!(plain.changed_pixels(&typed) > 40);
}

#[test]
fn tab_and_shift_tab_move_focus_in_order() {
    let d = desktop("login");
    assert_eq!(focused(&d), None);
    let mut order = Vec::new();
    for _ in 0..5 {
        keys(&d, "Tab");
        order.push(focused(&d).unwrap_or_default());
    }
    assert_eq!(order, ["username", "password", "remember", "sign_in", "username"]);
    keys(&d, "shift+Tab");
    assert_eq!(focused(&d).as_deref(), Some("sign_in"));
    keys(&d, "ISO_Left_Tab");
    assert_eq!(focused(&d).as_deref(), Some("remember"));
    // Typing a tab moves focus too.
    type_text(&d, "\t");
    assert_eq!(focused(&d).as_deref(), Some("sign_in"));
    // Clicking empty desktop clears the focus.
    click_at(&d, Point::new(5, 5));
    assert_eq!(focused(&d), None);
}

#[test]
fn tabbing_into_a_field_selects_its_text() {
    let d = desktop("login");
    click(&d, "username");
    type_text(&d, "bob");
    keys(&d, "Tab");
    keys(&d, "shift+Tab");
    type_text(&d, "alice");
    assert_eq!(field(&d, "username"), "alice");
}

#[test]
fn checkboxes_toggle_by_click_and_space() {
    let d = desktop("login");
    click(&d, "remember");
    assert!(state(&d).checkboxes["remember"]);
    assert_eq!(focused(&d).as_deref(), Some("remember"));
    keys(&d, "space");
    assert!(!state(&d).checkboxes["remember"]);
    type_text(&d, " ");
    assert!(state(&d).checkboxes["remember"]);
    let c = center(&d, "remember");
    act(&d, Action::DoubleClick { x: c.x, y: c.y });
    assert!(state(&d).checkboxes["remember"], "a double click toggles twice");
}

#[test]
fn pressing_then_leaving_a_button_does_not_activate_it() {
    let d = desktop("login");
    let b = center(&d, "sign_in");
    act(&d, Action::Move { x: b.x, y: b.y, keys: Vec::new() });
    act(&d, Action::MouseDown { button: MouseButton::Left, keys: Vec::new() });
    act(&d, Action::Move { x: 5, y: 5, keys: Vec::new() });
    act(&d, Action::MouseUp { button: MouseButton::Left });
    assert!(state(&d).clicked.is_empty());
    act(&d, Action::Move { x: b.x, y: b.y, keys: Vec::new() });
    act(&d, Action::MouseDown { button: MouseButton::Left, keys: Vec::new() });
    act(&d, Action::MouseUp { button: MouseButton::Left });
    assert_eq!(state(&d).clicked, vec!["sign_in"]);
    // The failed sign-in moved the focus to the password; Tab twice reaches the button again.
    keys(&d, "Tab");
    keys(&d, "Tab");
    assert_eq!(focused(&d).as_deref(), Some("sign_in"));
    keys(&d, "space");
    assert_eq!(state(&d).clicked, vec!["sign_in", "sign_in"], "space activates the focused button");
}

#[test]
fn dropdowns_open_on_click_and_choose_on_click() {
    let d = desktop("form");
    let closed = d.frame();
    click(&d, "country");
    let open = d.frame();
    assert!(open.changed_pixels(&closed) > 2000, "the popup is drawn");
    let (p, size) = d.widget_bounds("country").unwrap_or_else(|| panic!("country not visible"));
    let popup_top = p.y + size.height as i32 + 3;
    click_at(&d, Point::new(p.x + 30, popup_top + 26 * 2 + 13));
    assert_eq!(state(&d).selections["country"].as_deref(), Some("Canada"));
    // Closed again: clicking where the popup was hits the widgets beneath.
    click_at(&d, Point::new(p.x + 30, popup_top + 26 * 2 + 13));
    assert_eq!(state(&d).selections["country"].as_deref(), Some("Canada"));
}

#[test]
fn dropdowns_follow_the_keyboard() {
    let d = desktop("form");
    click(&d, "company");
    keys(&d, "Tab");
    assert_eq!(focused(&d).as_deref(), Some("country"));
    keys(&d, "Down");
    assert_eq!(state(&d).selections["country"].as_deref(), Some("Australia"));
    keys(&d, "Down");
    assert_eq!(state(&d).selections["country"].as_deref(), Some("Brazil"));
    let before = d.frame();
    keys(&d, "space");
    assert!(d.frame() != before);
    keys(&d, "Escape");
    assert!(d.frame() == before, "Escape closes the popup and changes nothing");
    keys(&d, "space");
    keys(&d, "Down");
    keys(&d, "Return");
    assert_eq!(state(&d).selections["country"].as_deref(), Some("Canada"));
    assert_eq!(state(&d).screen, "form", "Enter in an open dropdown chooses, it does not submit");
    type_text(&d, "u");
    assert_eq!(state(&d).selections["country"].as_deref(), Some("United Kingdom"));
    type_text(&d, "u");
    assert_eq!(state(&d).selections["country"].as_deref(), Some("United States"));
}

#[test]
fn lists_select_by_click_and_arrow_keys() {
    let d = desktop("form");
    let (p, _) = d.widget_bounds("plan").unwrap_or_else(|| panic!("plan not visible"));
    click_at(&d, Point::new(p.x + 40, p.y + 1 + 26 + 13));
    assert_eq!(state(&d).selections["plan"].as_deref(), Some("Pro"));
    keys(&d, "Down");
    assert_eq!(state(&d).selections["plan"].as_deref(), Some("Team"));
    keys(&d, "End");
    assert_eq!(state(&d).selections["plan"].as_deref(), Some("Enterprise"));
    keys(&d, "Up");
    keys(&d, "Up");
    assert_eq!(state(&d).selections["plan"].as_deref(), Some("Pro"));
}

#[test]
fn lists_longer_than_their_box_scroll_and_clamp() {
    let d = desktop("login");
    click(&d, "username");
    type_text(&d, "alice\thunter2\n\n");
    assert_eq!(state(&d).screen, "reports");
    let c = center(&d, "report");
    let before = d.frame();
    act(&d, Action::Scroll { x: c.x, y: c.y, scroll_x: 0, scroll_y: 40, keys: Vec::new() });
    assert_eq!(state(&d).scroll["report"], 40);
    assert!(d.frame().changed_pixels(&before) > 500);
    act(&d, Action::Scroll { x: c.x, y: c.y, scroll_x: 0, scroll_y: 10_000, keys: Vec::new() });
    assert_eq!(state(&d).scroll["report"], 12 * 26 - 6 * 26, "clamped at the end");
    act(&d, Action::Scroll { x: c.x, y: c.y, scroll_x: 0, scroll_y: -10_000, keys: Vec::new() });
    assert_eq!(state(&d).scroll["report"], 0);
    // Keyboard selection scrolls the chosen row into view.
    click_at(&d, Point::new(c.x - 50, c.y));
    keys(&d, "End");
    assert_eq!(state(&d).selections["report"].as_deref(), Some("December"));
    assert_eq!(state(&d).scroll["report"], 156);
}

#[test]
fn text_boxes_scroll_by_pixels_and_show_a_scrollbar() {
    let d = desktop("form");
    let c = center(&d, "terms_text");
    let before = d.frame();
    act(&d, Action::Scroll { x: c.x, y: c.y, scroll_x: 0, scroll_y: 100, keys: Vec::new() });
    assert_eq!(state(&d).scroll["terms_text"], 100);
    assert!(d.frame().changed_pixels(&before) > 1000);
    act(&d, Action::Scroll { x: c.x, y: c.y, scroll_x: 0, scroll_y: 100_000, keys: Vec::new() });
    let max = state(&d).scroll["terms_text"];
    assert!(max > 100 && max < 1000, "{max}");
    act(&d, Action::Scroll { x: c.x, y: c.y, scroll_x: 0, scroll_y: 5, keys: Vec::new() });
    assert_eq!(state(&d).scroll["terms_text"], max);
    act(&d, Action::Scroll { x: c.x, y: c.y, scroll_x: 0, scroll_y: -30, keys: Vec::new() });
    assert_eq!(state(&d).scroll["terms_text"], max - 30);
    // Dragging the scrollbar thumb back to the top.
    let (p, size) = d.widget_bounds("terms_text").unwrap_or_else(|| panic!("terms_text not visible"));
    let bar_x = p.x + size.width as i32 - 7;
    let bottom = p.y + size.height as i32 - 8;
    act(
        &d,
        Action::Drag {
            path: vec![Point::new(bar_x, bottom), Point::new(bar_x, p.y - 200)],
            button: Default::default(),
            keys: Vec::new(),
        },
    );
    assert_eq!(state(&d).scroll["terms_text"], 0);
}

fn thumb_x(d: &agentd_mock::MockDesktop, value: i64) -> (i32, i32) {
    let (p, size) = d.widget_bounds("seats").unwrap_or_else(|| panic!("seats not visible"));
    let track_x = p.x + 10;
    let track_w = size.width as i32 - 20;
    (track_x + ((value - 1) * track_w as i64 / 49) as i32, p.y + size.height as i32 / 2)
}

#[test]
fn sliders_follow_a_drag_and_the_keyboard() {
    let d = desktop("form");
    assert_eq!(state(&d).sliders["seats"], 5);
    let (x, y) = thumb_x(&d, 5);
    act(
        &d,
        Action::Drag {
            path: vec![Point::new(x, y), Point::new(x + 30, y + 20), Point::new(1270, y)],
            button: Default::default(),
            keys: Vec::new(),
        },
    );
    assert_eq!(state(&d).sliders["seats"], 50, "dragging past the end clamps at max");
    assert_eq!(focused(&d).as_deref(), Some("seats"));
    // An explicit press, moves and release.
    let (x, y) = thumb_x(&d, 50);
    let (mid, _) = thumb_x(&d, 25);
    act(&d, Action::Move { x, y, keys: Vec::new() });
    act(&d, Action::MouseDown { button: MouseButton::Left, keys: Vec::new() });
    act(&d, Action::Move { x: x - 10, y, keys: Vec::new() });
    act(&d, Action::Move { x: mid, y: y + 40, keys: Vec::new() });
    act(&d, Action::MouseUp { button: MouseButton::Left });
    assert_eq!(state(&d).sliders["seats"], 25);
    act(&d, Action::Move { x: 5, y: 5, keys: Vec::new() });
    assert_eq!(state(&d).sliders["seats"], 25, "moving after the release does nothing");
    keys(&d, "Right");
    assert_eq!(state(&d).sliders["seats"], 26);
    keys(&d, "Home");
    assert_eq!(state(&d).sliders["seats"], 1);
    // A click on the track jumps there.
    let (x, y) = thumb_x(&d, 40);
    click_at(&d, Point::new(x, y));
    assert_eq!(state(&d).sliders["seats"], 40);
}

#[test]
fn small_screens_scroll_the_window_to_reach_everything() {
    let d = sized("form", Some(Size::new(640, 480)));
    assert!(d.widget_center("plan").is_none(), "the plan list starts below the fold");
    // Tab focus brings widgets into view.
    click(&d, "full_name");
    for _ in 0..4 {
        keys(&d, "Tab");
    }
    assert_eq!(focused(&d).as_deref(), Some("plan"));
    let (p, size) = d.widget_bounds("plan").unwrap_or_else(|| panic!("plan not revealed"));
    assert_eq!(size.height, 4 * 26 + 2, "fully visible");
    keys(&d, "Down");
    assert_eq!(state(&d).selections["plan"].as_deref(), Some("Pro"));
    // Scrolling over the window body scrolls the window.
    let d = sized("form", Some(Size::new(640, 480)));
    act(&d, Action::Scroll { x: 20, y: 300, scroll_x: 0, scroll_y: 2000, keys: Vec::new() });
    let (p2, size2) = d.widget_bounds("plan").unwrap_or_else(|| panic!("plan not scrolled into view"));
    assert_eq!(size2, size);
    assert!(p2.y <= p.y, "scrolled to the end, at least as far as Tab did");
    click_at(&d, Point::new(p2.x + 30, p2.y + 1 + 3 * 26 + 5));
    assert_eq!(state(&d).selections["plan"].as_deref(), Some("Enterprise"));
}

#[test]
fn clicking_into_a_long_unfocused_field_puts_the_caret_where_the_text_is_drawn() {
    let d = desktop("form");
    click(&d, "company");
    let long = "abcdefghij".repeat(8);
    type_text(&d, &long);
    click(&d, "email");
    // Unfocused, the company field shows the start of its text; a click near its left edge lands there.
    let (p, size) = d.widget_bounds("company").unwrap_or_else(|| panic!("company not visible"));
    click_at(&d, Point::new(p.x + 10, p.y + size.height as i32 / 2));
    type_text(&d, "<");
    assert_eq!(field(&d, "company"), format!("<{long}"));
}
